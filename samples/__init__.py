"""Small real traces bundled with gaplens; the app opens decode_eager.json.gz by default."""
