"""How ``dp2ddp check`` writes its diagnostics: text, with source (on a terminal), JSON, SARIF 2.1.0, GitHub annotations.

Each writer takes every file's diagnostics in input order and returns text;
the CLI prints it. Paths are written as given on the command line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from dp2ddp import __version__
from dp2ddp.diagnostics import Diagnostic
from dp2ddp.rules import RULES, section

FORMATS = ("text", "json", "sarif", "github")
INFORMATION_URI = "https://github.com/dp2ddp/dp2ddp"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SARIF_LEVEL = {"error": "error", "warning": "warning", "note": "note"}


@dataclass(frozen=True)
class FileDiagnostics:
    path: Path
    source: str
    diagnostics: tuple[Diagnostic, ...]


def text(files: Sequence[FileDiagnostics], show_source: bool) -> str:
    """``path:line:col: CODE message [*]``, and with ``show_source`` the line, a caret and the rule's help."""
    out: list[str] = []
    for file in files:
        lines = file.source.splitlines()
        for d in file.diagnostics:
            out.append(f"{file.path}:{d.line}:{d.column}: {d.code} {d.message}{' [*]' if d.fixable else ''}")
            if show_source and 0 < d.line <= len(lines):
                source_line = lines[d.line - 1].expandtabs(1)
                width = max(1, (d.end_column - d.column) if d.end_line == d.line else len(source_line) - d.column + 1)
                gutter = " " * len(str(d.line))
                out += [
                    f"{gutter} |",
                    f"{d.line} | {source_line}",
                    f"{gutter} | {' ' * (d.column - 1)}{'^' * width} {RULES[d.code].name}",
                    f"{gutter} = help: {help_line(d.code)}",
                    "",
                ]
    return "\n".join(out) + ("\n" if out else "")


def help_line(code: str) -> str:
    """The rule's first sentence of *Why is this bad?*, and where to read more."""
    why = (section(RULES[code].doc, "Why is this bad?") or RULES[code].message).split(". ")[0].rstrip(".")
    return f"{why}. See `dp2ddp explain {code}`."


def as_json(files: Sequence[FileDiagnostics]) -> str:
    """dp2ddp's own document, described by the JSON Schema ``dp2ddp/schemas/check-output.schema.json``."""
    document = {
        "tool": "dp2ddp",
        "version": __version__,
        "diagnostics": [
            {
                "path": str(file.path),
                "code": d.code,
                "name": d.name,
                "severity": d.severity,
                "message": d.message,
                "line": d.line,
                "column": d.column,
                "end_line": d.end_line,
                "end_column": d.end_column,
                "fixable": d.fixable,
            }
            for file in files
            for d in file.diagnostics
        ],
    }
    return json.dumps(document, indent=2) + "\n"


def sarif(files: Sequence[FileDiagnostics]) -> str:
    """One SARIF 2.1.0 run: every rule with its documentation, and a result per diagnostic."""
    codes = list(RULES)
    rules = [
        {
            "id": rule.code,
            "name": rule.name,
            "shortDescription": {"text": rule.name.replace("-", " ")},
            "fullDescription": {"text": section(rule.doc, "What it does") or rule.name},
            "help": {"text": rule.doc or rule.message, "markdown": rule.doc or rule.message},
            "defaultConfiguration": {"level": _SARIF_LEVEL[rule.severity]},
        }
        for rule in RULES.values()
    ]
    results = [
        {
            "ruleId": d.code,
            "ruleIndex": codes.index(d.code),
            "level": _SARIF_LEVEL[d.severity],
            "message": {"text": d.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": artifact_uri(file.path)},
                        "region": {
                            "startLine": d.line,
                            "startColumn": d.column,
                            "endLine": d.end_line,
                            "endColumn": max(d.end_column, d.column + 1) if d.end_line == d.line else d.end_column,
                        },
                    }
                }
            ],
        }
        for file in files
        for d in file.diagnostics
    ]
    document = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "dp2ddp", "version": __version__, "informationUri": INFORMATION_URI, "rules": rules}},
                # Columns count characters, as Python's str and LibCST do; SARIF's
                # default is UTF-16 code units, which differ after a non-BMP
                # character such as an emoji.
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }
    return json.dumps(document, indent=2) + "\n"


def artifact_uri(path: Path) -> str:
    """A SARIF ``uri`` for a path: a relative reference, or a ``file:`` URI when absolute, percent-encoded either way.

    SARIF requires a valid URI reference, so a space, ``%`` or ``#`` in a file
    name must be escaped, and a relative path whose first segment holds a ``:``
    must not read as a scheme.
    """
    if path.is_absolute():
        return path.as_uri()
    return quote(path.as_posix(), safe="/")


def github(files: Sequence[FileDiagnostics]) -> str:
    """GitHub Actions workflow commands: each diagnostic is an annotation on the pull request's diff."""
    level = {"error": "error", "warning": "warning", "note": "notice"}
    out = []
    for file in files:
        for d in file.diagnostics:
            properties = f"file={_escape_property(file.path.as_posix())},line={d.line},col={d.column}"
            if d.end_line == d.line:
                properties += f",endColumn={d.end_column}"
            else:
                properties += f",endLine={d.end_line}"
            properties += f",title={_escape_property(f'{d.code} {d.name}')}"
            out.append(f"::{level[d.severity]} {properties}::{_escape_data(f'{d.code} {d.message}')}")
    return "\n".join(out) + ("\n" if out else "")


def _escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(value: str) -> str:
    return _escape_data(value).replace(":", "%3A").replace(",", "%2C")
