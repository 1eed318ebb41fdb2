import argparse
import re
import sys
from collections import Counter


def count_words(text: str) -> list[tuple[str, int]]:
    """(word, count), most frequent first, ties alphabetical."""
    counts = Counter(re.findall(r"[a-z']+", text.lower()))
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def main(argv=None, out=sys.stdout) -> int:
    parser = argparse.ArgumentParser(description="count words")
    parser.add_argument("file")
    parser.add_argument("--top", type=int, default=None, help="only the N most frequent words")
    args = parser.parse_args(argv)
    with open(args.file, encoding="utf-8") as handle:
        rows = count_words(handle.read())
    if args.top is not None:
        rows = rows[: args.top]
    for word, count in rows:
        print(f"{word} {count}", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
