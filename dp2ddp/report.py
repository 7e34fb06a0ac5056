"""Counts what happened to each file and alone decides the exit code."""

from __future__ import annotations

from dataclasses import dataclass

EXIT_OK = 0
EXIT_WORK_FOUND = 1
EXIT_ERROR = 2
# Ctrl-C, as shells report SIGINT.
EXIT_INTERRUPTED = 130


@dataclass
class Report:
    # Under --check or --diff nothing is written: files "would be" converted.
    dry_run: bool = False
    check: bool = False
    changed: int = 0
    unchanged: int = 0
    failed: int = 0
    # Unchanged files that convert left as they were because of an error finding: a human must act.
    blocked: int = 0

    def done(self, changed: bool) -> None:
        if changed:
            self.changed += 1
        else:
            self.unchanged += 1

    def fail(self) -> None:
        self.failed += 1

    def block(self) -> None:
        self.blocked += 1

    @property
    def exit_code(self) -> int:
        if self.failed:
            return EXIT_ERROR
        if (self.check and self.changed) or self.blocked:
            return EXIT_WORK_FOUND
        return EXIT_OK

    def summary(self) -> str:
        verb = "would be converted" if self.dry_run else "converted"
        blocked = f" ({self.blocked} left as {'it was' if self.blocked == 1 else 'they were'}: see the errors above)" if self.blocked else ""
        return (
            f"{_files(self.changed)} {verb}, {_files(self.unchanged)} unchanged{blocked}, "
            f"{_files(self.failed)} failed"
        )


def _files(count: int) -> str:
    return f"{count} file{'' if count == 1 else 's'}"
