"""doctor's compositions: `run_doctor` and the parts it composes beside the main stack's variants (the
doctor wing's commands/)."""
