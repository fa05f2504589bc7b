"""Headless commands: each module renders one reading as text or JSON."""
