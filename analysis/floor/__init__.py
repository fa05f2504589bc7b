"""The hardware floor: op sizes and calls, the GPU specs table, the floor reading."""
