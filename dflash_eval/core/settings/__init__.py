"""The settings: each idea's flags in one section (`sections.py`: `Flag`, `Section`), the sections of a run
(`inputs`, `output`, `work`, `execution`) and `RunSettings`, made of them (`run_settings.py`)."""
