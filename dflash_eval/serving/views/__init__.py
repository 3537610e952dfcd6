"""How `served` is shown: terminal tables and self-contained HTML pages (the serving wing's render/)."""
