"""The shim's MCP tools: registered from plain functions, listed with their schemas, called with checked arguments.

A tool is a sync function whose parameters carry their limits and texts
(`Annotated[..., Field(...)]`) and whose return annotation is
`Annotated[ToolResult, SomeOut]`: pydantic turns the parameters into the
tool's `inputSchema` and checks the arguments against them, and `SomeOut`'s
schema is its `outputSchema`, against which every successful result's
`structuredContent` is checked. The schemas, the argument model's name
(`<function>Arguments`) and the error texts are those the MCP SDK's
`MCPServer` published, so clients see no difference
(`tests/system/test_mcp_protocol.py` holds its answers). The body runs on a
worker thread: tools make blocking client calls.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType
from typing import Annotated, Any, get_args, get_origin

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaWarningKind

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolAnnotations:
    """MCP's hints about a tool's behaviour (only those given are published)."""

    title: str | None = None
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None

    def wire(self) -> dict[str, Any]:
        """The annotations as MCP's `ToolAnnotations` object."""
        names = {"title": "title", "read_only_hint": "readOnlyHint", "destructive_hint": "destructiveHint",
                 "idempotent_hint": "idempotentHint", "open_world_hint": "openWorldHint"}
        return {wire: getattr(self, name) for name, wire in names.items() if getattr(self, name) is not None}


@dataclass(frozen=True)
class ToolResult:
    """What a tool call returns: text for the model, the same as an object (`structured`), or an error."""

    text: str
    structured: dict[str, Any] | None = None
    is_error: bool = False

    def wire(self) -> dict[str, Any]:
        """The result as MCP's `CallToolResult`."""
        result: dict[str, Any] = {"content": [{"type": "text", "text": self.text}]}
        if self.structured is not None:
            result["structuredContent"] = self.structured
        result["isError"] = self.is_error
        return result


class _StrictJsonSchema(GenerateJsonSchema):
    """Fails registration instead of warning when a result type cannot be published as a JSON schema."""

    def emit_warning(self, kind: JsonSchemaWarningKind, detail: str) -> None:
        raise ValueError(f"JSON schema warning: {kind} - {detail}")


class _Arguments(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)


@dataclass(frozen=True)
class _Shape:
    """What a tool function's signature gives: its argument model, result type and their JSON schemas."""

    arguments: type[BaseModel]
    output: TypeAdapter | None
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None


_SHAPES: dict[CodeType, _Shape] = {}
"""Shapes by the tool function's code: every session registers the same functions (closures over its own state),
and building the schemas takes about 10 ms a tool."""


def _shape(fn: Callable) -> _Shape:
    arguments = _argument_model(fn)
    output = _output_type(fn)
    adapter = TypeAdapter(output) if output is not None else None
    return _Shape(arguments, adapter, arguments.model_json_schema(by_alias=True),
                  _inline_root_ref(adapter.json_schema(schema_generator=_StrictJsonSchema)) if adapter else None)


@dataclass
class Tool:
    """One registered tool."""

    name: str
    title: str | None
    description: str
    annotations: ToolAnnotations | None
    fn: Callable[..., ToolResult]
    shape: _Shape

    def wire(self) -> dict[str, Any]:
        """The tool as `tools/list` shows it."""
        listed: dict[str, Any] = {"name": self.name}
        if self.title is not None:
            listed["title"] = self.title
        listed["description"] = self.description
        listed["inputSchema"] = self.shape.input_schema
        if self.shape.output_schema is not None:
            listed["outputSchema"] = self.shape.output_schema
        if self.annotations is not None:
            listed["annotations"] = self.annotations.wire()
        return listed


class Tools:
    """The tools one MCP server offers, in the order they were registered."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def tool(self, *, name: str, title: str | None = None, description: str,
             annotations: ToolAnnotations | None = None) -> Callable[[Callable], Callable]:
        """Registers the decorated function as the tool `name` (see the module docstring for its shape).

        Raises:
            ValueError: a parameter or the result type cannot be published as a JSON schema.
        """
        def register(fn: Callable) -> Callable:
            shape = _SHAPES.get(fn.__code__) or _SHAPES.setdefault(fn.__code__, _shape(fn))
            self._tools[name] = Tool(name=name, title=title, description=description, annotations=annotations, fn=fn,
                                     shape=shape)
            return fn

        return register

    def remove(self, name: str) -> None:
        """Stops offering the tool `name`."""
        del self._tools[name]

    def names(self) -> list[str]:
        """The names of the tools offered."""
        return list(self._tools)

    def listed(self) -> list[dict[str, Any]]:
        """Every tool as `tools/list` shows it."""
        return [tool.wire() for tool in self._tools.values()]

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Runs the tool `name` with `arguments` on a worker thread and returns its `CallToolResult`: a tool error
        for an unknown tool, arguments that do not fit, or a body that raised (its text stays in the log)."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult(f"Unknown tool: {name}", is_error=True).wire()
        try:
            checked = tool.shape.arguments.model_validate(_parse_json_strings(tool.shape.arguments, arguments))
        except ValidationError as exc:
            fields = sorted({".".join(map(str, error["loc"])) for error in exc.errors()})
            log.info("Tool %r rejected arguments: %r", name, fields)  # the values are the caller's data
            return ToolResult(f"Error executing tool {name}: {exc}", is_error=True).wire()
        kwargs = {field.alias or key: getattr(checked, key) for key, field in type(checked).model_fields.items()}
        try:
            result = await anyio.to_thread.run_sync(functools.partial(tool.fn, **kwargs))
            if not isinstance(result, ToolResult):
                raise TypeError(f"tool {name} returned {type(result).__name__}, not a ToolResult")
            if tool.shape.output is not None and not result.is_error:
                tool.shape.output.validate_python(result.structured)
        except Exception:
            log.exception("Tool %r raised an unexpected exception", name)
            return ToolResult(f"Error executing tool {name}", is_error=True).wire()
        return result.wire()


def _argument_model(fn: Callable) -> type[BaseModel]:
    """The pydantic model of `fn`'s parameters, named `<function>Arguments`; a parameter whose name a model method
    has is kept under the alias of that name."""
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn, eval_str=True).parameters.values():
        annotation = Any if param.annotation is inspect.Parameter.empty else param.annotation
        key, extra = param.name, {}
        if callable(getattr(BaseModel, key, None)):
            key, extra = f"field_{key}", {"alias": key}
        typed = Annotated[(annotation, Field(**extra))]  # type: ignore[valid-type]
        fields[key] = (typed, param.default) if param.default is not inspect.Parameter.empty else typed
    return create_model(f"{fn.__name__}Arguments", __base__=_Arguments, **fields)


def _output_type(fn: Callable) -> Any:
    """`SomeOut` of a `-> Annotated[ToolResult, SomeOut]` tool (None for a tool without one)."""
    annotation = inspect.signature(fn, eval_str=True).return_annotation
    if get_origin(annotation) is Annotated:
        base, *metadata = get_args(annotation)
        if base is ToolResult and metadata:
            return metadata[0]
    return None


def _inline_root_ref(schema: dict[str, Any]) -> dict[str, Any]:
    """A schema whose root is a bare `$ref` (a self-referential model) with the definition copied onto the root:
    `outputSchema` must be an object."""
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/$defs/"):
        return schema
    return {**schema["$defs"][ref.removeprefix("#/$defs/")], **{k: v for k, v in schema.items() if k != "$ref"}}


def _parse_json_strings(model: type[BaseModel], arguments: dict[str, Any]) -> dict[str, Any]:
    """`arguments` with a JSON list or object given as a string (as some clients send them) parsed, for a parameter
    that is not a plain string."""
    fields = {field.alias or key: field for key, field in model.model_fields.items()}
    parsed = dict(arguments)
    for key, value in arguments.items():
        field = fields.get(key)
        if field is None or not isinstance(value, str) or field.annotation is str:
            continue
        try:
            decoded = json.loads(value)
        except (ValueError, RecursionError):
            continue
        if not isinstance(decoded, str | int | float):
            parsed[key] = decoded
    return parsed
