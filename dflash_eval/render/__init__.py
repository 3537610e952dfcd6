"""Rendering: everything that turns results into text for people (terminal now, HTML later)."""
