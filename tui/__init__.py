"""The Textual app and the command line: the only package that draws anything."""
