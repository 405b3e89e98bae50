"""placeholder"""
from typing import Any


def add_parser(sub: Any) -> None:
    sub.add_parser("doctor")
def run(args: Any) -> int:
    return 0
