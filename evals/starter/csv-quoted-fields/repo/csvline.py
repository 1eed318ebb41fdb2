def parse_line(line: str) -> list[str]:
    """Split one CSV line into its fields."""
    return line.split(",")
