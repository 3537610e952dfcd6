"""How doctor is shown on the terminal: the variants table, the window depths, the engines' readings (the
doctor wing's render/)."""
