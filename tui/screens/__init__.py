"""Screens of the viewer: help, prompts (search, phase, time), statistics and instances, lists of gaps and smells."""
