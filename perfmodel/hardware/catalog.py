"""Find, read and validate hardware specs: bundled ids, aliases, user YAML with ``extends``.

YAML is read with ``yaml.safe_load`` only. Errors name the field and the fix and are
raised as :class:`~perfmodel._errors.SpecError` with the full list in ``.errors``.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import functools
import logging
import math
import os
import stat
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from pydantic import ValidationError

from perfmodel._errors import PerfmodelError, PerfmodelWarning, SpecError
from perfmodel._limits import MAX_RESIDUAL_ROWS, MAX_SPEC_BYTES, clip_message
from perfmodel.hardware._yaml import YamlLimitError, load_bounded
from perfmodel.hardware.spec import HardwareSpec

__all__ = [
    "allow_spec_dirs",
    "bundled_path",
    "format_validation_error",
    "list_hardware",
    "load_hardware",
    "load_hardware_file",
    "resolve_id",
    "spec_from_dict",
    "specs_dir",
]

#: Common spellings -> bundled id. Resolution logs a note (once per spelling; the command
#: line prints it on stderr).
ALIASES: Mapping[str, str] = MappingProxyType({
    "h100": "h100-sxm", "h100-sxm5": "h100-sxm", "h100-sxm5-80gb": "h100-sxm",
    "h100-80gb": "h100-sxm", "h100-80gb-hbm3": "h100-sxm", "h100-sxm-80gb": "h100-sxm",
    "a100": "a100-80gb-sxm", "a100-sxm": "a100-80gb-sxm", "a100-sxm4-80gb": "a100-80gb-sxm",
    "a100-80gb": "a100-80gb-sxm", "a100-sxm4-40gb": "a100-40gb-sxm", "a100-40gb": "a100-40gb-sxm",
    "a100-pcie": "a100-80gb-pcie", "a100-pcie-80gb": "a100-80gb-pcie",
    "a100-pcie-40gb": "a100-40gb-pcie",
    "h200": "h200-sxm", "h200-141gb": "h200-sxm", "v100": "v100-sxm2-32gb",
    "v100-sxm2": "v100-sxm2-32gb", "v100-pcie": "v100-pcie-32gb", "p100": "p100-pcie-16gb",
    "tesla-t4": "t4", "tesla-p4": "p4", "geforce-rtx-4090": "rtx-4090", "4090": "rtx-4090",
    "geforce-rtx-3090": "rtx-3090", "3090": "rtx-3090", "geforce-rtx-5090": "rtx-5090",
    "5090": "rtx-5090", "instinct-mi300x": "mi300x", "mi300": "mi300x", "mi250": "mi250x",
    "mi355": "mi355x", "mi325": "mi325x", "gb200-nvl72": "gb200", "b200-sxm": "b200",
    "gb300-nvl72": "gb300", "b300-sxm": "b300", "b300-sxm6": "b300",
    "rtx-pro-6000-blackwell-server-edition": "rtx-pro-6000-server",
    "arc-b60": "arc-pro-b60", "intel-arc-pro-b60": "arc-pro-b60",
    "cpu": "cpu-local", "local": "cpu-local",
})


def specs_dir() -> Path:
    """Folder holding the bundled YAML specs (inside the wheel, or the source checkout)."""
    here = Path(__file__).resolve().parent.parent
    packaged = here / "hardware_specs"
    if packaged.is_dir():
        return packaged
    return here.parent / "hardware_specs"


@functools.lru_cache(maxsize=1)
def _bundled_paths() -> dict[str, Path]:
    """Bundled id (the file's stem) -> path; two files with one stem are an error."""
    paths: dict[str, Path] = {}
    for path in sorted(specs_dir().rglob("*.yaml")):
        if path.stem in paths:
            raise SpecError(str(path), [
                f"id: '{path.stem}' is bundled twice ({paths[path.stem]} and {path}); "
                "rename or remove one"
            ])
        paths[path.stem] = path
    return paths


def bundled_path(spec_id: str) -> Path:
    """Path of the bundled YAML file of ``spec_id`` (an id or alias)."""
    return _bundled_paths()[resolve_id(spec_id)]


def list_hardware() -> list[str]:
    """Ids of every bundled spec, sorted."""
    return sorted(_bundled_paths())


def _normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def resolve_id(name: str) -> str:
    """Map a bundled id or a common spelling (``H100``, ``A100``) to a bundled id, or a
    unique prefix of one (``rtx-409``), except a model number the id extends with a letter
    (``l40`` is another GPU than ``l40s``).

    Raises :class:`PerfmodelError` for unknown or ambiguous names, listing candidates.
    """
    ids = _bundled_paths()
    key = _normalize(name)
    if key in ids:
        return key
    if key.startswith("nvidia-"):
        key = key[len("nvidia-"):]
        if key in ids:
            return key
    if key in ALIASES and ALIASES[key] in ids:
        target = ALIASES[key]
        _note(f"note: '{name}' resolved to '{target}' (say '{target}' to silence this note)")
        return target
    prefix = [i for i in ids if i.startswith(key)]
    # a model number followed by a letter names another product: 'l40' is not the 'l40s'
    # (twice its tensor rate), so such a prefix is no abbreviation ('rtx-409' still is)
    if len(prefix) == 1 and key[-1:].isdigit() and prefix[0][len(key):len(key) + 1].isalpha():
        prefix = []
    if len(prefix) == 1:
        _note(f"note: '{name}' resolved to '{prefix[0]}'")
        return prefix[0]
    if len(prefix) > 1:
        raise PerfmodelError("gpu", f"'{name}' is ambiguous", f"use one of {', '.join(prefix)}")
    names = list(ids) + [alias for alias, target in ALIASES.items() if target in ids]
    close = difflib.get_close_matches(key, names, n=4, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise PerfmodelError(
        "gpu", f"unknown hardware '{name}'",
        f"{hint}run 'perfmodel specs list' for bundled ids, or pass a path to a YAML file",
    )


#: Notes of the library (an alias resolved) go to this logger at INFO level: silent in a
#: program that configures no logging, printed on stderr by the command line.
LOG = logging.getLogger("perfmodel")
_NOTED: set[str] = set()


def _note(text: str) -> None:
    if text not in _NOTED:
        _NOTED.add(text)
        LOG.info(text)


class _DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping that names the same key twice (YAML would silently keep the last)."""


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` (no tags that build Python objects) that rejects duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str):
                continue  # numbers, and unhashable keys SafeLoader itself refuses
            if key in seen:
                raise _DuplicateKeyError(
                    "while reading a mapping", node.start_mark,
                    f"duplicate key '{key}'", key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(str(path), [f"{path} is not a regular file (a folder or a device);"
                                        " pass a spec YAML file"])
        with path.open("rb") as fh:
            raw = fh.read(MAX_SPEC_BYTES + 1)
        if len(raw) > MAX_SPEC_BYTES:
            raise SpecError(str(path), [
                f"more than {MAX_SPEC_BYTES:,} bytes, far more than a spec can be "
                "(perfmodel._limits.MAX_SPEC_BYTES); pass a spec YAML file"])
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise SpecError(str(path), [f"file not found: {path}"]) from None
    except UnicodeDecodeError as exc:
        raise SpecError(str(path), [
            f"not UTF-8 text (byte {exc.start} cannot be decoded); a spec is a YAML text "
            "file: save it as UTF-8"]) from None
    except OSError as exc:
        raise SpecError(str(path), [f"cannot read {path}: {exc.strerror or exc}"]) from None
    try:
        # a SafeLoader (builds no Python objects), alias expansion and depth bounded
        data = load_bounded(text, _StrictLoader)
    except YamlLimitError as exc:
        raise SpecError(str(path), [f"refused: {exc}"]) from None
    except _DuplicateKeyError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}" if mark else ""
        raise SpecError(str(path), [f"{clip_message(str(exc.problem), 120)}{where}; keep one "
                                    "of them"]) from None
    except yaml.constructor.ConstructorError as exc:
        raise SpecError(str(path), [
            f"unsafe or unknown YAML tag ({clip_message(str(exc.problem), 120)}); specs are "
            "plain YAML: remove tags such "
            "as !!python/object"
        ]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = clip_message(str(getattr(exc, "problem", None) or exc))
        raise SpecError(str(path), [f"malformed YAML{where}: {problem}"]) from None
    if data is None:
        raise SpecError(str(path), ["the file is empty; a spec needs id, name, vendor, arch, "
                                    "compute, peaks, memory and sources"])
    if not isinstance(data, dict):
        raise SpecError(str(path), [f"top level must be a mapping of fields, got "
                                    f"{type(data).__name__}"])
    return data


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``over`` into ``base`` recursively; ``over`` wins; ``null`` deletes a key."""
    out = dict(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _raw_with_extends(path: Path, chain: tuple[str, ...],
                      read: list[Path] | None = None) -> dict[str, Any]:
    """The mapping of the spec at ``path`` merged onto its ``extends`` chain; each file
    read is appended to ``read``."""
    data = _read_yaml(path)
    if read is not None:
        read.append(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str) or not parent.strip():
        raise SpecError(str(path), [
            "extends: must be a bundled id (e.g. h100-sxm) or a path to a YAML file"
        ])
    parent_path = _locate_parent(parent, path, chain)
    key = str(parent_path.resolve())
    if key in chain:
        cycle = " -> ".join([*chain, key])
        raise SpecError(str(path), [f"extends: cycle detected ({cycle}); remove one extends"])
    base = _raw_with_extends(parent_path, (*chain, key), read)
    return _deep_merge(_inherited_provenance(base, data), data)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _inherited_provenance(base: Mapping[str, Any], child: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` (a parent spec) with its efficiency provenance rewritten for a child that
    ``extends`` it: a figure the child inherits is ``family: <parent id>``; a figure the child
    sets again loses the parent's provenance (the child states its own, or none)."""
    eff = _mapping(base.get("efficiency"))
    prov = _mapping(eff.get("provenance"))
    if not prov:
        return dict(base)
    child_eff = _mapping(child.get("efficiency"))
    child_compute = child_eff.get("compute")
    parent_id = str(base.get("id", "")).strip()
    kept: dict[str, Any] = {}
    for figure in prov:
        if figure.startswith("compute."):
            overridden = child_compute is not None and (
                not isinstance(child_compute, Mapping)
                or figure.removeprefix("compute.") in child_compute)
        elif figure == "sustained_clock":
            overridden = "sustained_clock" in _mapping(child.get("compute"))
        else:
            overridden = figure in child_eff
        if not overridden:
            kept[figure] = f"family: {parent_id}" if parent_id else prov[figure]
    return {**base, "efficiency": {**eff, "provenance": kept}}


#: Extra folders ``extends:`` may read from, besides the bundled catalogue and the folders
#: of the files being loaded: the CLI's ``--spec-dir`` sets it for one command (see
#: :func:`allow_spec_dirs`); ``PERFMODEL_SPEC_PATH`` (folders separated by os.pathsep) adds
#: more.
_EXTRA_SPEC_DIRS: contextvars.ContextVar[tuple[Path, ...]] = contextvars.ContextVar(
    "perfmodel_extra_spec_dirs", default=())


@contextlib.contextmanager
def allow_spec_dirs(*dirs: str | Path) -> Iterator[None]:
    """Within the block, ``extends:`` may also name spec files under ``dirs``.

    By default ``extends:`` reads only the bundled catalogue, the folder of the file that
    extends, and the folder of the file first loaded, so that a spec cannot make perfmodel
    read (and echo in its errors) an arbitrary file such as ``/etc/passwd``. The setting is
    a context variable: it holds for this thread (or task) only.
    """
    token = _EXTRA_SPEC_DIRS.set((*_EXTRA_SPEC_DIRS.get(),
                                  *(Path(d).expanduser().resolve() for d in dirs)))
    try:
        yield
    finally:
        _EXTRA_SPEC_DIRS.reset(token)


def _spec_roots(child: Path, chain: tuple[str, ...]) -> list[Path]:
    roots = [specs_dir().resolve(), child.resolve().parent]
    if chain:
        roots.append(Path(chain[0]).parent)
    roots.extend(_EXTRA_SPEC_DIRS.get())
    env = os.environ.get("PERFMODEL_SPEC_PATH", "")
    roots.extend(Path(d).expanduser().resolve() for d in env.split(os.pathsep) if d.strip())
    return roots


def _locate_parent(name: str, child: Path, chain: tuple[str, ...] = ()) -> Path:
    """Path of the spec named by ``extends: name`` in the file ``child``.

    A name ending in .yaml/.yml (or with a slash) is a path, relative to the folder of
    ``child``; anything else is a bundled id or alias. A path must name a .yaml/.yml file
    inside a spec folder (:func:`allow_spec_dirs`), after following symbolic links.
    """
    if name.endswith((".yaml", ".yml")) or "/" in name:
        shown = clip_message(repr(name), 120)
        candidate = Path(name).expanduser()
        if not candidate.is_absolute():
            candidate = child.parent / candidate
        real = candidate.resolve()
        roots = _spec_roots(child, chain)
        if real.suffix not in (".yaml", ".yml") or not any(
                real == r or r in real.parents for r in roots):
            raise SpecError(str(child), [
                f"extends: {shown} is not a .yaml file in a spec folder (the bundled "
                "catalogue, the folder of the file that extends or of the file loaded); move "
                "it there, or allow its folder: perfmodel --spec-dir DIR"])
        if not candidate.is_file():
            raise SpecError(str(child), [
                f"extends: no file {shown} (looked for {candidate}); paths are relative to "
                "the folder of the file that extends"
            ])
        return candidate
    try:
        return _bundled_paths()[resolve_id(name)]
    except PerfmodelError as exc:
        raise SpecError(str(child), [f"extends: {exc.problem} ({exc.fix})"]) from None


#: pydantic error types about the type of a value: the offending input is worth showing.
_SHOW_INPUT = ("int_", "float_", "string_", "bool_", "dict_", "list_", "literal_", "model_")


def format_validation_error(exc: ValidationError) -> list[str]:
    """Turn a pydantic error into lines ``field.path: problem (fix)``."""
    lines: list[str] = []
    listed: set[tuple[Any, ...]] = set()  # blocks whose allowed fields were already listed
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        kind = err["type"]
        msg = err["msg"].removeprefix("Value error, ")
        if kind == "extra_forbidden":
            field = str(err["loc"][-1])
            msg = f"unknown field '{clip_message(field, 60)}'"
            known = _known_fields(err["loc"][:-1])
            close = difflib.get_close_matches(field, known, n=1)
            if close:
                msg += f"; did you mean '{close[0]}'?"
            elif tuple(err["loc"][:-1]) not in listed:
                listed.add(tuple(err["loc"][:-1]))
                msg += f"; allowed: {', '.join(known)}"
        elif kind == "missing":
            msg = "required field is missing"
        elif kind in ("greater_than", "greater_than_equal"):
            msg = (f"{msg} (got {_shown(err.get('input'))}); sizes, rates and capacities must "
                   "be positive")
        elif kind == "less_than_equal":
            msg = f"{msg} (got {_shown(err.get('input'))})" + _percent_hint(err)
        elif kind.startswith(_SHOW_INPUT):
            msg = f"{msg} (got {_shown(err.get('input'))})"
        for part in msg.splitlines():
            lines.append(clip_message(f"{loc}: {part}" if loc else part))
    if len(lines) > _MAX_LINES:
        lines = [*lines[:_MAX_LINES], f"(+{len(lines) - _MAX_LINES} more problems not shown)"]
    return lines


#: Problems listed per spec; a file with more is mostly not a spec.
_MAX_LINES = 20


def _shown(value: object) -> str:
    """A value echoed in an error, cut short (it may be a large or foreign document)."""
    return clip_message(repr(value), 80)


def _percent_hint(err: Any) -> str:
    """For a fraction written as a percentage (``memory: 88``), the fraction meant."""
    value, ctx = err.get("input"), err.get("ctx") or {}
    limit = ctx.get("le")
    if (isinstance(value, (int, float)) and not isinstance(value, bool)
            and isinstance(limit, (int, float)) and limit < value <= 100 and limit <= 1.5):
        return (f"; a fraction, not a percentage: write {value / 100:g} or "
                f"'{value:g} %'")
    return ""


def _known_fields(loc: tuple[Any, ...]) -> list[str]:
    """Field names allowed at ``loc`` (a pydantic error location) for typo suggestions."""
    model: Any = HardwareSpec
    parts = list(loc)
    while parts:
        part = parts.pop(0)
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            return []
        ann = fields[part].annotation
        if getattr(ann, "__origin__", None) is dict:
            if not parts:
                return []
            parts.pop(0)  # the dict key (a dtype under peaks, say)
        args = getattr(ann, "__args__", ())
        model = next((a for a in (ann, *args) if hasattr(a, "model_fields")), None)
        if model is None:
            return []
    return sorted(getattr(model, "model_fields", {}))


def spec_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> HardwareSpec:
    """Validate a mapping (already merged) as a :class:`HardwareSpec`."""
    try:
        spec = HardwareSpec.model_validate(dict(data))
    except ValidationError as exc:
        raise SpecError(source, format_validation_error(exc)) from None
    tables = spec.calibration.residuals if spec.calibration else {}
    big = [f"calibration.residuals.{clip_message(key, 60)}: {len(rows):,} rows, more than "
           f"{MAX_RESIDUAL_ROWS:,} (perfmodel._limits.MAX_RESIDUAL_ROWS); refit with "
           "'perfmodel calibrate fit', which writes at most 601"
           for key, rows in tables.items() if len(rows) > MAX_RESIDUAL_ROWS]
    if big:
        raise SpecError(source, big)
    bad = _non_finite_calibration(spec)
    if bad:
        raise SpecError(source, bad)
    return spec


def _non_finite_calibration(spec: HardwareSpec) -> list[str]:
    """The calibrated numbers of ``spec`` that are not finite (NaN or ±inf), each named:
    one of them would make every prediction it touches NaN or infinite, silently."""
    cal = spec.calibration
    if cal is None:
        return []
    fix = "; refit with 'perfmodel calibrate fit', or remove the value"
    out = [f"calibration.residuals.{clip_message(key, 60)}: row {i} holds {value!r}{fix}"
           for key, rows in cal.residuals.items()
           for i, row in enumerate(rows) for value in row
           if not math.isfinite(value)][:1]
    out += [f"calibration.params.{clip_message(key, 40)}.{clip_message(name, 40)}: "
            f"{value!r}{fix}" for key, figures in cal.params.items()
            for name, value in figures.items() if not math.isfinite(value)][:1]
    out += [f"calibration.constants.{clip_message(name, 60)}: {value!r}{fix}"
            for name, value in cal.constants.items() if not math.isfinite(value)][:1]
    return out


#: Loaded spec files by absolute path as given: (the files read with their (mtime_ns,
#: size), the folders ``extends`` could read from, the spec, whether it lies in the bundled
#: catalogue, the nearest bundled file of its ``extends`` chain). An entry holds while
#: none of its files changed (``stat`` follows links, so a link pointed elsewhere shows as
#: a change) and the allowed folders are the same; bounded.
_FILE_CACHE: dict[str, tuple[tuple[tuple[str, int, int], ...], tuple[Any, ...],
                             HardwareSpec, bool, Path | None]] = {}
_FILE_CACHE_MAX = 256
#: Files modified less than this long ago (ns) are read again at the next load.
_RACY_NS = 2_000_000_000


def _stamp(path: str) -> tuple[str, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (path, info.st_mtime_ns, info.st_size)


def _cached_file(p: Path) -> tuple[HardwareSpec, bool, Path | None]:
    """The validated spec of the file ``p``, whether it is a bundled one and the nearest
    bundled file its ``extends`` chain reads (None: none), parsed again only when it (or a
    file of its ``extends`` chain) changed since the last load: same modification time and
    size."""
    key = os.path.abspath(p)
    roots = (_EXTRA_SPEC_DIRS.get(), os.environ.get("PERFMODEL_SPEC_PATH", ""))
    hit = _FILE_CACHE.get(key)
    if hit is not None and hit[1] == roots and all(
            _stamp(f) == (f, mtime, size) for f, mtime, size in hit[0]):
        return hit[2], hit[3], hit[4]
    read: list[Path] = []
    real = p.resolve()
    data = _raw_with_extends(p, (str(real),), read)
    spec = spec_from_dict(data, source=str(p))
    bundled = _bundled_root() in real.parents
    base = next((f for f in read[1:] if _bundled_root() in f.resolve().parents), None)
    files = [key, *(str(f.resolve()) for f in read[1:])]
    stamps = tuple(st for st in map(_stamp, files) if st is not None)
    # a file changed within the last seconds could change again within the same clock tick
    # of its modification time (racy): such a load is not kept
    recent = time.time_ns() - _RACY_NS
    if len(stamps) == len(read) and all(mtime < recent for _, mtime, _ in stamps):
        if len(_FILE_CACHE) >= _FILE_CACHE_MAX:
            _FILE_CACHE.clear()
        _FILE_CACHE[key] = (stamps, roots, spec, bundled, base)
    return spec, bundled, base


@functools.lru_cache(maxsize=1)
def _bundled_root() -> Path:
    return specs_dir().resolve()


def load_hardware_file(path: str | Path) -> HardwareSpec:
    """Read, merge (``extends``) and validate the YAML spec at ``path``.

    The result is cached by path: a file (or a file it ``extends``) is parsed again only
    once its modification time or size changed (a file modified in the last two seconds is
    always read again).

    A spec outside the bundled catalogue with a tensor peak that has no
    ``flops_per_clock_per_unit`` issues a :class:`PerfmodelWarning`: without it, a 2:4
    sparse figure (twice the dense one) cannot be told from a dense one. A peak inherited
    unchanged from a bundled spec it ``extends`` was checked there and is not warned of.
    """
    p = Path(path)
    spec, bundled, base = _cached_file(p)
    if not bundled:
        vetted = _cached_file(base)[0].peaks if base is not None else {}
        unchecked = [dt for dt, pk in spec.peaks.items()
                     if pk.unit == "tensor" and pk.flops_per_clock_per_unit is None
                     and vetted.get(dt) != pk]
        if unchecked:
            warnings.warn(PerfmodelWarning(
                f"{p.name}: peaks", f"{', '.join(unchecked)} not cross-checked: without "
                "flops_per_clock_per_unit a 2:4-sparse figure cannot be told from a dense "
                "one", "add flops_per_clock_per_unit (dense) or make sure the peaks are "
                "dense"), stacklevel=2)
    return spec


@functools.lru_cache(maxsize=128)
def _load_bundled(spec_id: str) -> HardwareSpec:
    path = _bundled_paths()[spec_id]
    spec = load_hardware_file(path)
    if spec.id != spec_id:
        raise SpecError(str(path), [
            f"id: '{spec.id}' differs from the file name '{spec_id}.yaml'; make them agree"
        ])
    return spec


def load_hardware(id_or_path: str | Path | HardwareSpec) -> HardwareSpec:
    """Load a bundled spec by id (or alias such as ``"H100"``) or a YAML file by path.

    A :class:`HardwareSpec` passes through unchanged. Bundled specs are cached.
    """
    if isinstance(id_or_path, HardwareSpec):
        return id_or_path
    if isinstance(id_or_path, Path) or str(id_or_path).endswith((".yaml", ".yml")):
        return load_hardware_file(id_or_path)
    if not isinstance(id_or_path, str):
        raise PerfmodelError("gpu", f"expected an id or a path, got {type(id_or_path).__name__}",
                             "pass e.g. 'h100-sxm' or 'my_gpu.yaml'")
    if os.path.isfile(id_or_path):  # a file of that name wins (os.path: no Path object)
        return load_hardware_file(id_or_path)
    return _load_bundled(resolve_id(id_or_path))
