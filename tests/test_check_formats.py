"""``dp2ddp check``'s machine-readable outputs, held to their schemas.

SARIF is validated against the official OASIS SARIF 2.1.0 schema vendored in
tests/data/, ``--format json`` against the schema dp2ddp installs with the
package, and ``--format github`` against the workflow-command syntax GitHub
Actions parses. Every test drives the real CLI, as a user or CI job would.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from click.testing import CliRunner
from jsonschema.validators import validator_for

from dp2ddp.check import Diagnostic
from dp2ddp.cli import main
from dp2ddp.formats import FileDiagnostics, github
from dp2ddp.rules import RULES

DATA = Path(__file__).resolve().parent / "data"

# A hand-written DDP script with four known findings: a fixable DDP505, two
# unguarded side effects (DDP501) and a barrier only rank 0 reaches (DDP502).
DDP_SCRIPT = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("gloo")
    net = torch.nn.Linear(2, 2)
    model = DistributedDataParallel(net)
    dataset = torch.utils.data.TensorDataset(torch.randn(8, 2), torch.randn(8, 2))
    loader = DataLoader(dataset, sampler=DistributedSampler(dataset), shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print("loss", loss.item())
    torch.save(model.state_dict(), "model.pt")
    if dist.get_rank() == 0:
        dist.barrier()


if __name__ == "__main__":
    main()
"""

# The same training, written correctly: check must find nothing in it.
CLEAN_SCRIPT = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("gloo")
    net = torch.nn.Linear(2, 2)
    model = DistributedDataParallel(net)
    dataset = torch.utils.data.TensorDataset(torch.randn(8, 2), torch.randn(8, 2))
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if dist.get_rank() == 0:
            print("loss", loss.item())
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), "model.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

# A script whose one finding sits after a character outside the BMP, where
# code points and UTF-16 code units disagree.
WIDE_SCRIPT = """\
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main():
    dist.init_process_group("gloo")
    model = DistributedDataParallel(net)
    label = "\u00e9\U0001f600"; print(label)


if __name__ == "__main__":
    main()
"""


def locate(source: str, needle: str) -> tuple[int, int]:
    """The 1-based line and column of ``needle``'s first occurrence, counted in characters."""
    for number, line in enumerate(source.splitlines(), start=1):
        if needle in line:
            return number, line.index(needle) + 1
    raise AssertionError(f"{needle!r} not in the script")


# (code, where the flagged node starts, fixable) for DDP_SCRIPT, in report order.
EXPECTED = [
    ("DDP505", locate(DDP_SCRIPT, "shuffle=True"), True),
    ("DDP501", locate(DDP_SCRIPT, 'print("loss"'), False),
    ("DDP501", locate(DDP_SCRIPT, "torch.save("), False),
    ("DDP502", locate(DDP_SCRIPT, "dist.barrier()"), False),
]


def run_check(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["check", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout


def load_schema(text: str) -> Any:
    """The validator for a schema, after checking the schema itself against its own metaschema."""
    schema = json.loads(text)
    cls = validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.fixture(scope="module")
def sarif_validator() -> Any:
    return load_schema((DATA / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def json_validator() -> Any:
    # Read through importlib.resources, as an installed dp2ddp exposes it.
    schema = resources.files("dp2ddp").joinpath("schemas", "check-output.schema.json")
    return load_schema(schema.read_text(encoding="utf-8"))


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # Paths in the output are written as given; running from the folder keeps them short and relative.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(DDP_SCRIPT, encoding="utf-8")
    (tmp_path / "clean.py").write_text(CLEAN_SCRIPT, encoding="utf-8")
    return tmp_path


def assert_valid(validator: Any, document: Any) -> None:
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message[:300]}" for e in errors)


# --- SARIF -----------------------------------------------------------------


def test_vendored_sarif_schema_is_the_official_oasis_one() -> None:
    """The test data is OASIS's SARIF 2.1.0 schema, not a look-alike, and is itself a valid schema."""
    schema = json.loads((DATA / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
    assert schema["title"] == "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema"
    assert schema.get("$id", schema.get("id")) in {
        "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json",
        "https://raw.githubusercontent.com/oasis-tcs/sarif-spec/master/Schemata/sarif-schema-2.1.0.json",
    }
    validator_for(schema).check_schema(schema)


def test_sarif_output_validates_and_locates_each_finding(workdir: Path, sarif_validator: Any) -> None:
    """Every result names its rule, level and the 1-based start of the flagged code."""
    code, out = run_check("--format", "sarif", "train.py")
    assert code == 1
    document = json.loads(out)
    assert_valid(sarif_validator, document)
    assert document["version"] == "2.1.0"
    (run,) = document["runs"]
    results = run["results"]
    assert [r["ruleId"] for r in results] == [code for code, _, _ in EXPECTED]
    for result, (rule, (line, column), _) in zip(results, EXPECTED):
        assert result["level"] == RULES[rule].severity
        assert result["message"]["text"]
        (location,) = result["locations"]
        region = location["physicalLocation"]["region"]
        assert (region["startLine"], region["startColumn"]) == (line, column)
        # The schema cannot say that a region ends after it starts.
        assert (region["endLine"], region["endColumn"]) > (region["startLine"], region["startColumn"])
        assert location["physicalLocation"]["artifactLocation"]["uri"] == "train.py"


def test_sarif_results_refer_to_declared_rules(workdir: Path) -> None:
    """Each ruleId is a rule of the driver, and ruleIndex points at that very rule, as code scanning looks it up."""
    document = json.loads(run_check("--format", "sarif", "train.py")[1])
    driver = document["runs"][0]["tool"]["driver"]
    rules = driver["rules"]
    assert driver["name"] == "dp2ddp"
    assert [rule["id"] for rule in rules] == list(RULES)
    for result in document["runs"][0]["results"]:
        assert result["ruleId"] in {rule["id"] for rule in rules}
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]


def test_clean_file_gives_empty_sarif_results_that_validate(workdir: Path, sarif_validator: Any) -> None:
    """No findings still makes a complete SARIF log (code scanning then closes old alerts), and exit 0."""
    code, out = run_check("--format", "sarif", "clean.py")
    assert code == 0
    document = json.loads(out)
    assert_valid(sarif_validator, document)
    assert document["runs"][0]["results"] == []


# A URI reference's characters (RFC 3986): unreserved, sub-delims, ":", "@", "/", and %XX escapes.
_URI_CHARACTERS = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*")


def test_sarif_uri_escapes_an_awkward_file_name(workdir: Path, sarif_validator: Any) -> None:
    """A space or ``%`` in a path is percent-encoded, so the uri is a valid URI reference that decodes back to the path."""
    folder = workdir / "my runs"
    folder.mkdir()
    (folder / "a,b%c.py").write_text(DDP_SCRIPT, encoding="utf-8")
    document = json.loads(run_check("--format", "sarif", "my runs/a,b%c.py")[1])
    assert_valid(sarif_validator, document)
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in document["runs"][0]["results"]}
    (uri,) = uris
    assert _URI_CHARACTERS.fullmatch(uri), uri
    assert urlsplit(uri).scheme == ""
    assert unquote(uri) == "my runs/a,b%c.py"


def test_sarif_uri_of_an_absolute_path_is_a_file_uri(workdir: Path) -> None:
    """An absolute path becomes a ``file:`` URI, never a bare path a reader could take for a relative one."""
    document = json.loads(run_check("--format", "sarif", str(workdir / "train.py"))[1])
    uri = document["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == (workdir / "train.py").as_uri()


def test_sarif_columns_are_declared_as_code_points(workdir: Path, sarif_validator: Any) -> None:
    """After an emoji, the column counts characters, and the run says so (SARIF's default is UTF-16 units)."""
    (workdir / "wide.py").write_text(WIDE_SCRIPT, encoding="utf-8")
    document = json.loads(run_check("--format", "sarif", "wide.py")[1])
    assert_valid(sarif_validator, document)
    (run,) = document["runs"]
    assert run["columnKind"] == "unicodeCodePoints"
    (result,) = run["results"]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == locate(WIDE_SCRIPT, "print(label)")


# --- JSON ------------------------------------------------------------------


def test_json_schema_ships_in_the_package_and_is_draft_2020_12() -> None:
    """The schema is package data, a valid 2020-12 schema, strict at both levels."""
    schema = json.loads(resources.files("dp2ddp").joinpath("schemas", "check-output.schema.json").read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    validator_for(schema).check_schema(schema)
    assert schema["additionalProperties"] is False
    assert schema["$defs"]["diagnostic"]["additionalProperties"] is False


def test_json_output_validates_and_matches_the_text_output(workdir: Path, json_validator: Any) -> None:
    """JSON carries exactly the text format's findings, in the same order, at the same positions."""
    code, out = run_check("--format", "json", "train.py", "clean.py")
    assert code == 1
    document = json.loads(out)
    assert_valid(json_validator, document)
    text = run_check("--no-show-source", "train.py", "clean.py")[1]
    text_lines = [re.match(r"(.+?):(\d+):(\d+): (DDP\d{3}) ", line).groups() for line in text.splitlines()]  # type: ignore[union-attr]
    json_lines = [(d["path"], str(d["line"]), str(d["column"]), d["code"]) for d in document["diagnostics"]]
    assert json_lines == text_lines
    assert [(d["code"], (d["line"], d["column"]), d["fixable"]) for d in document["diagnostics"]] == EXPECTED
    for d in document["diagnostics"]:
        assert d["name"] == RULES[d["code"]].name and d["severity"] == RULES[d["code"]].severity


def test_json_for_a_clean_file_validates(workdir: Path, json_validator: Any) -> None:
    """No findings is an empty list, not a missing key."""
    code, out = run_check("--format", "json", "clean.py")
    assert code == 0
    document = json.loads(out)
    assert_valid(json_validator, document)
    assert document["diagnostics"] == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("code", "E501"),
        ("severity", "info"),
        ("line", 0),
        ("column", 1.5),
        ("fixable", "yes"),
        ("unexpected", True),
    ],
)
def test_json_schema_rejects_a_drifted_diagnostic(workdir: Path, json_validator: Any, field: str, value: object) -> None:
    """The schema is strict: a renamed severity, a 0-based line or a new key fails, so format changes are deliberate."""
    document = json.loads(run_check("--format", "json", "train.py")[1])
    document["diagnostics"][0][field] = value
    assert not json_validator.is_valid(document)


# --- GitHub workflow commands ----------------------------------------------

_COMMAND = re.compile(r"::(?P<level>error|warning|notice) (?P<properties>[^:\r\n]*)::(?P<data>[^\r\n]*)")
# A property value escapes %, CR, LF, ":" and ","; the message escapes %, CR and LF.
_PROPERTY_VALUE = re.compile(r"(?:[^%,:\r\n]|%25|%0D|%0A|%3A|%2C)*")
_DATA = re.compile(r"(?:[^%\r\n]|%25|%0D|%0A)*")


def _unescape(value: str) -> str:
    # %25 last, so an escaped "%2C" in the original does not turn into ",".
    for escaped, plain in (("%2C", ","), ("%3A", ":"), ("%0A", "\n"), ("%0D", "\r"), ("%25", "%")):
        value = value.replace(escaped, plain)
    return value


def parse_commands(output: str) -> list[tuple[str, dict[str, str], str]]:
    """Each line as (level, properties, message), asserting it is a well-formed workflow command."""
    commands = []
    for line in output.splitlines():
        match = _COMMAND.fullmatch(line)
        assert match, line
        properties = {}
        for item in match["properties"].split(","):
            key, _, value = item.partition("=")
            assert key in {"file", "line", "endLine", "col", "endColumn", "title"}, item
            assert _PROPERTY_VALUE.fullmatch(value), item
            properties[key] = _unescape(value)
        assert _DATA.fullmatch(match["data"]), line
        commands.append((match["level"], properties, _unescape(match["data"])))
    return commands


def test_github_output_is_one_annotation_per_finding(workdir: Path) -> None:
    """Each finding is an ``::error``/``::warning`` command on its file, line and column, its message led by the code."""
    code, out = run_check("--format", "github", "train.py", "clean.py")
    assert code == 1
    commands = parse_commands(out)
    assert len(commands) == len(EXPECTED)
    for (level, properties, message), (rule, (line, column), _) in zip(commands, EXPECTED):
        assert level == RULES[rule].severity
        assert properties["file"] == "train.py"
        assert (int(properties["line"]), int(properties["col"])) == (line, column)
        assert properties["title"] == f"{rule} {RULES[rule].name}"
        assert re.fullmatch(rf"{rule} \S.*", message)


def test_github_output_escapes_a_comma_and_percent_in_the_path(workdir: Path) -> None:
    """A ``,`` would end the file property early and a ``%`` would read as an escape; both are encoded."""
    (workdir / "a,b%c.py").write_text(DDP_SCRIPT, encoding="utf-8")
    out = run_check("--format", "github", "a,b%c.py")[1]
    assert "file=a%2Cb%25c.py," in out
    assert {properties["file"] for _, properties, _ in parse_commands(out)} == {"a,b%c.py"}


def test_github_escapes_a_message_with_percent_and_newlines() -> None:
    """Rule messages hold no such characters today; a message with ``%``, CR or LF still stays one command."""
    diagnostic = Diagnostic("DDP501", "100% of ranks\r\nwrite: this", 3, 5, 4, 2, "warning")
    out = github([FileDiagnostics(Path("dir:x/t,1.py"), "", (diagnostic,))])
    assert out == (
        "::warning file=dir%3Ax/t%2C1.py,line=3,col=5,endLine=4,title=DDP501 unguarded-side-effect"
        "::DDP501 100%25 of ranks%0D%0Awrite: this\n"
    )
    ((_, properties, message),) = parse_commands(out)
    assert properties["file"] == "dir:x/t,1.py"
    assert message == "DDP501 100% of ranks\r\nwrite: this"


def test_github_output_is_empty_for_a_clean_file(workdir: Path) -> None:
    """Nothing to annotate prints nothing, not a blank line."""
    assert run_check("--format", "github", "clean.py") == (0, "")


# --- text ------------------------------------------------------------------


def test_text_marks_exactly_the_fixable_findings(workdir: Path) -> None:
    """``[*]`` ends a line exactly when the finding has a safe fix (here DDP505's ``shuffle=True``)."""
    out = run_check("--no-show-source", "train.py")[1]
    marked = [line.endswith(" [*]") for line in out.splitlines()]
    assert marked == [fixable for _, _, fixable in EXPECTED]
    assert sum("[*]" in line for line in out.splitlines()) == 1


def test_show_source_puts_a_caret_under_the_flagged_code(workdir: Path) -> None:
    """The source line is quoted and the carets start under the finding's column and span the flagged code."""
    out = run_check("--show-source", "train.py")[1].splitlines()
    lines = DDP_SCRIPT.splitlines()
    for rule, (line, column), _ in EXPECTED:
        header = next(i for i, text in enumerate(out) if text.startswith(f"train.py:{line}:{column}: {rule} "))
        quoted, caret = out[header + 2], out[header + 3]
        prefix = f"{line} | "
        assert quoted == prefix + lines[line - 1]
        gutter = " " * len(str(line)) + " | "
        assert caret.startswith(gutter)
        marks = caret[len(gutter):]
        assert marks.index("^") == column - 1, caret
        assert marks.rstrip().endswith(RULES[rule].name)
        assert out[header + 4].lstrip().startswith("= help: ")
    # DDP505 flags exactly the `shuffle=True` keyword.
    header = next(i for i, text in enumerate(out) if " DDP505 " in text)
    assert out[header + 3].count("^") == len("shuffle=True")


def test_clean_file_prints_no_text_and_exits_0(workdir: Path) -> None:
    """A clean file prints nothing on stdout; the summary goes to stderr."""
    assert run_check("--show-source", "clean.py") == (0, "")
