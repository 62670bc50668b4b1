"""A small regex-based reader of C declarations, enough for dstrain.h and the
cffi cdef text: enums, structs, opaque struct typedefs, function prototypes
and integer #defines. Both texts go through the same reader and are rendered
into canonical lines, so a drift shows as a readable diff.

It is deliberately strict: a statement it cannot classify is reported as
"unparsed", so a new kind of declaration in the header fails the drift test
instead of being skipped silently.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Tuple


@dataclasses.dataclass
class Declarations:
    enums: Dict[str, List[Tuple[str, str]]] = dataclasses.field(default_factory=dict)
    structs: Dict[str, List[str]] = dataclasses.field(default_factory=dict)
    opaque: Dict[str, str] = dataclasses.field(default_factory=dict)
    callbacks: Dict[str, str] = dataclasses.field(default_factory=dict)  # function pointer typedefs
    functions: Dict[str, str] = dataclasses.field(default_factory=dict)
    defines: Dict[str, str] = dataclasses.field(default_factory=dict)
    unparsed: List[str] = dataclasses.field(default_factory=list)

    def int_defines(self) -> Dict[str, int]:
        out = {}
        for name, value in self.defines.items():
            if re.fullmatch(r"-?\d+", value):
                out[name] = int(value)
        return out

    def struct_fields(self, name: str) -> List[str]:
        """Field names of a struct typedef, in order."""
        return [re.sub(r"\[.*\]", "", f).split()[-1] for f in self.structs[name]]

    def render(self, skip_defines=("DST_VERSION_",)) -> List[str]:
        """Canonical lines: one block per declaration, sorted by kind and name."""
        lines: List[str] = []
        for name, value in sorted(self.int_defines().items()):
            if not name.startswith(skip_defines):
                lines.append(f"#define {name} {value}")
        for name in sorted(self.opaque):
            lines.append(f"typedef struct {self.opaque[name]} {name};")
        for name in sorted(self.callbacks):
            lines.append(self.callbacks[name])
        for name in sorted(self.enums):
            lines.append(f"enum {name} {{")
            lines += [f"  {item} = {value}" for item, value in self.enums[name]]
            lines.append("}")
        for name in sorted(self.structs):
            lines.append(f"struct {name} {{")
            lines += [f"  {field};" for field in self.structs[name]]
            lines.append("}")
        for name in sorted(self.functions):
            lines.append(self.functions[name])
        lines += [f"UNPARSED: {s}" for s in self.unparsed]
        return lines


def _norm(text: str) -> str:
    """Whitespace- and pointer-spacing-insensitive form of a declaration."""
    text = re.sub(r"\s*\*\s*", " * ", text)
    text = re.sub(r"\s*\[\s*", "[", text)
    text = re.sub(r"\s*\]", "]", text)
    text = re.sub(r"\s*,\s*", ", ", text)
    return re.sub(r"\s+", " ", text).strip()


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _preprocess(text: str) -> Tuple[str, Dict[str, str]]:
    """Drops directives and `#ifdef __cplusplus` blocks; collects #defines.
    Macro continuation lines are joined first."""
    text = text.replace("\\\n", " ")
    defines: Dict[str, str] = {}
    kept: List[str] = []
    stack: List[bool] = []  # per #if level: is this block skipped?
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            directive = stripped[1:].strip()
            word = directive.split(None, 1)[0] if directive else ""
            if word in ("if", "ifdef", "ifndef"):
                stack.append(directive in ("ifdef __cplusplus", "if defined(__cplusplus)"))
            elif word == "endif":
                if stack:
                    stack.pop()
            elif word in ("else", "elif"):
                if stack:
                    stack[-1] = False
            elif word == "define" and not any(stack):
                parts = directive.split(None, 2)
                if len(parts) >= 2 and "(" not in parts[1]:
                    defines[parts[1]] = parts[2].strip() if len(parts) == 3 else ""
            continue
        if not any(stack):
            kept.append(line)
    return "\n".join(kept), defines


def read(text: str) -> Declarations:
    """Reads the declarations of a C header or a cffi cdef."""
    body, defines = _preprocess(_strip_comments(text))
    decls = Declarations(defines=defines)
    body = re.sub(r"\b(DST_API|extern)\b", " ", body)
    ints = decls.int_defines()

    def dims(field: str) -> str:
        return re.sub(r"\[(\w+)\]", lambda m: f"[{ints.get(m.group(1), m.group(1))}]", field)

    def enum(m: "re.Match[str]") -> str:
        items = []
        for item in m.group(2).split(","):
            if item.strip():
                name, _, value = item.partition("=")
                items.append((name.strip(), _norm(value) or "?"))
        decls.enums[m.group(3)] = items
        return ";"

    def struct(m: "re.Match[str]") -> str:
        fields = [dims(_norm(f)) for f in m.group(2).split(";") if f.strip()]
        decls.structs[m.group(3)] = fields
        return ";"

    def opaque(m: "re.Match[str]") -> str:
        decls.opaque[m.group(2)] = m.group(1)
        return ";"

    body = re.sub(r"typedef\s+enum\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", enum, body, flags=re.S)
    body = re.sub(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", struct, body, flags=re.S)
    body = re.sub(r"typedef\s+struct\s+(\w+)\s+(\w+)\s*;", opaque, body)
    body = re.sub(r'"C"\s*\{|^\s*\}\s*$', " ", body, flags=re.M)

    def callback(m: "re.Match[str]") -> str:
        ret, name, params = _norm(m.group(1)), m.group(2), _norm(m.group(3))
        decls.callbacks[name] = f"typedef {ret} (*{name})({params});"
        return ";"

    body = re.sub(r"typedef\s+([\w\s\*]+?)\(\s*\*\s*(\w+)\s*\)\s*\((.*?)\)\s*;", callback, body,
                  flags=re.S)

    for statement in body.split(";"):
        statement = statement.strip()
        if not statement:
            continue
        m = re.fullmatch(r"(.+?)\b(\w+)\s*\((.*)\)", statement, flags=re.S)
        if not m:
            decls.unparsed.append(_norm(statement))
            continue
        ret, name, params = _norm(m.group(1)), m.group(2), _norm(m.group(3))
        if params == "void":
            params = ""
        decls.functions[name] = f"{ret} {name}({params});"
    return decls
