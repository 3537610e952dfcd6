"""What a server counted (vLLM, SGLang, per request), read into counts, checked, and set beside an offline run:
pure functions over text and numbers, no torch (the serving wing's bottom layer, like core/)."""
