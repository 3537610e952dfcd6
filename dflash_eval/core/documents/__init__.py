"""The result documents: what every file we write holds (`run_document`, `row_documents`, `doctor_document`:
TypedDicts), how a document is checked when read (`json_types`, `invariants`, `run_rows`), the folder's file
names and readers (`results`), the per-position CSV (`per_position`) and the generated reference page
(`reference`: docs/result-documents.md)."""
