"""Modal screens of the viewer: help, search prompt, phase picker."""
