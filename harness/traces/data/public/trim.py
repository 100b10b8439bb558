"""How the public transcripts here were made small: keep the records Tao's importers read, cut long texts.

    python harness/traces/data/public/trim.py OUT_DIR SRC.jsonl...

Claude Code transcripts keep user and assistant records (and the `progress` records that wrap a subagent's
messages) with their time, working directory (first record only), sidechain marks and message content;
consecutive assistant records of one turn become one record (at the later time, as the importer reads them);
records written twice (same `uuid`, as on resume) are kept once and the uuid dropped; the session id stays on
the first record only and names the file, where the importer finds it for the others; call ids are shortened
(`c1`, `c2`, ... in the call and its result). Codex CLI
rollouts keep `session_meta` (id, time, cwd), the user's and the assistant's messages, reasoning summaries, and
every tool call and its output. Everything else (token counts, snapshots, hook progress, encrypted reasoning,
system prompts, images) is dropped. Texts are cut to their head and tail (`_cut`): a tool's output keeps
OUTPUT_HEAD + OUTPUT_TAIL characters, a call's string arguments ARG_CHARS (Claude Code's own tools keep only the
arguments the importer reads: a Bash call's `description` goes), thoughts and messages TEXT_CHARS.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUTPUT_HEAD, OUTPUT_TAIL, ARG_CHARS, TEXT_CHARS, TASK_CHARS = 80, 20, 120, 100, 300
_CUT = "\n[...]\n"
# The input keys harness/traces/claude_code.py reads of Claude Code's own tools (others keep every key).
_READ_KEYS = {"Bash": {"command"}, "Read": {"file_path", "offset", "limit"}, "NotebookRead": {"notebook_path"},
              "Grep": {"pattern", "path", "glob", "type", "-i"}, "LS": {"path"}, "Write": {"file_path", "content"},
              "Edit": {"file_path", "old_string", "new_string", "replace_all"}, "MultiEdit": {"file_path", "edits"}}


def _cut(text: str, head: int, tail: int = 0) -> str:
    """`text` itself when short, else its first `head` and last `tail` characters around a mark."""
    return text if len(text) <= head + tail + len(_CUT) else text[:head] + _CUT + (text[-tail:] if tail else "")


def _cut_strings(value: Any, limit: int) -> Any:
    """A JSON value with every string in it cut to `limit` characters."""
    if isinstance(value, str):
        return _cut(value, limit)
    if isinstance(value, dict):
        return {k: _cut_strings(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v, limit) for v in value]
    return value


def _output_text(content: Any) -> str:
    """A tool result's content as one string (the text parts of a list; images dropped)."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _claude_item(item: Any) -> dict[str, Any] | None:
    """One content block of a Claude Code message, cut; None for blocks the importer does not read."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind == "text" and item.get("text"):
        return {"type": "text", "text": _cut(str(item["text"]), TEXT_CHARS)}
    if kind == "thinking" and item.get("thinking"):
        return {"type": "thinking", "thinking": _cut(str(item["thinking"]), TEXT_CHARS)}
    if kind == "tool_use":
        tool_input: dict[str, Any] = item["input"] if isinstance(item.get("input"), dict) else {}
        read = _READ_KEYS.get(str(item.get("name")))
        kept = {k: v for k, v in tool_input.items() if read is None or k in read}
        return {"type": "tool_use", "id": item.get("id"), "name": item.get("name"),
                "input": _cut_strings(kept, ARG_CHARS)}
    if kind == "tool_result":
        out = {"type": "tool_result", "tool_use_id": item.get("tool_use_id"),
               "content": _cut(_output_text(item.get("content")), OUTPUT_HEAD, OUTPUT_TAIL)}
        return {**out, "is_error": True} if item.get("is_error") else out
    return None


def _claude_message(message: Any, role: str) -> dict[str, Any]:
    """A Claude Code message with only its role and cut content."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return {"role": role, "content": _cut(content, TASK_CHARS)}
    items = [kept for item in content or [] if (kept := _claude_item(item)) is not None]
    return {"role": role, "content": items}


def _claude_record(record: dict[str, Any], seen_cwd: set[str]) -> dict[str, Any] | None:
    """A Claude Code record as the importer reads it; None for a record it does not read."""
    kind = record.get("type")
    if kind == "progress":
        data = record.get("data")
        inner = data.get("message") if isinstance(data, dict) else None
        if not (isinstance(inner, dict) and inner.get("type") in ("user", "assistant")):
            return None
        agent = data.get("agentId") if isinstance(data, dict) else None
        inner_record = _claude_record({**inner, "sessionId": record.get("sessionId"), "agentId": agent,
                                       "cwd": inner.get("cwd") or record.get("cwd")}, seen_cwd) or {}
        inner_record.pop("sessionId", None)
        inner_record.pop("agentId", None)
        return {"type": "progress", "sessionId": record.get("sessionId"), "timestamp": record.get("timestamp"),
                "parentToolUseID": record.get("parentToolUseID"), "data": {"agentId": agent, "message": inner_record}}
    if kind not in ("user", "assistant"):
        return None
    out: dict[str, Any] = {"type": kind, "sessionId": record.get("sessionId"), "timestamp": record.get("timestamp")}
    key = f"{record.get('sessionId')}/{record.get('agentId') or ''}"
    if record.get("cwd") and key not in seen_cwd:
        seen_cwd.add(key)
        out["cwd"] = record["cwd"]
    for flag in ("isSidechain", "agentId", "isMeta", "isCompactSummary"):
        if record.get(flag):
            out[flag] = record[flag]
    out["message"] = _claude_message(record.get("message"), kind)
    return out


def _codex_record(record: dict[str, Any]) -> dict[str, Any] | None:
    """A Codex CLI rollout record as the importer reads it; None for a record it does not read."""
    kind, payload = record.get("type"), record.get("payload")
    if not isinstance(payload, dict):
        return None
    keep: dict[str, Any] | None = None
    if kind == "session_meta":
        keep = {k: payload.get(k) for k in ("id", "timestamp", "cwd", "originator", "cli_version")}
    elif kind == "response_item":
        item = payload.get("type")
        if item == "message" and payload.get("role") in ("user", "assistant"):
            texts = [_cut(str(p.get("text") or ""), TASK_CHARS) for p in payload.get("content") or []
                     if isinstance(p, dict) and p.get("text")]
            keep = {"type": item, "role": payload["role"], "content": [{"type": "text", "text": t} for t in texts]}
        elif item == "reasoning":
            summary = " ".join(str(s.get("text") or "") for s in payload.get("summary") or [] if isinstance(s, dict))
            keep = {"type": item, "summary": [{"type": "summary_text", "text": _cut(summary, TEXT_CHARS)}]}
        elif item in ("function_call", "custom_tool_call", "local_shell_call"):
            keep = {k: payload[k] for k in ("type", "name", "call_id", "action") if k in payload}
            for field in ("arguments", "input"):
                if isinstance(payload.get(field), str):
                    keep[field] = _cut_json_text(payload[field])
        elif item in ("function_call_output", "custom_tool_call_output"):
            keep = {"type": item, "call_id": payload.get("call_id"),
                    "output": _cut(_output_text(payload.get("output")), OUTPUT_HEAD, OUTPUT_TAIL)}
    return None if keep is None else {"timestamp": record.get("timestamp"), "type": kind, "payload": keep}


def _cut_json_text(text: str) -> str:
    """A call's argument text cut: inside the JSON object when it is one, else as text (a patch, a script)."""
    try:
        return json.dumps(_cut_strings(json.loads(text), ARG_CHARS), ensure_ascii=False)
    except ValueError:
        return _cut(text, ARG_CHARS * 2)


def trim(src: Path, out_dir: Path) -> Path:
    """Write the trimmed copy of one transcript into `out_dir` (named by its session id); returns its path."""
    seen_uuid: set[str] = set()
    seen_cwd: set[str] = set()
    kept: list[dict[str, Any]] = []
    for line in src.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        uuid = record.get("uuid")
        if isinstance(uuid, str) and uuid:
            if uuid in seen_uuid:
                continue
            seen_uuid.add(uuid)
        small = _codex_record(record) if "payload" in record else _claude_record(record, seen_cwd)
        if small is not None and not _merged(kept, small):
            kept.append(small)
    _shorten_ids(kept)
    meta = next((r["payload"] for r in kept if r.get("type") == "session_meta"), None)
    session = str(meta.get("id")) if meta else next((str(r["sessionId"]) for r in kept if r.get("sessionId")), src.stem)
    for record in kept[1:]:
        record.pop("sessionId", None)  # the importer takes the file's name, which is the session id
    out = out_dir / (f"rollout-{session}.jsonl" if meta else f"{session}.jsonl")
    out.write_text("".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in kept),
                   encoding="utf-8")
    return out


def _shorten_ids(records: list[dict[str, Any]]) -> None:
    """Give every call a short id (`c1`, `c2`, ...) in place of Claude Code's `toolu_...` and Codex's `call_...`,
    the same in the call and in its result."""
    short: dict[str, str] = {}

    def rename(holder: dict[str, Any], key: str) -> None:
        if isinstance(holder.get(key), str):
            holder[key] = short.setdefault(holder[key], f"c{len(short) + 1}")

    for record in records:
        payload = record.get("payload")
        if isinstance(payload, dict):
            rename(payload, "call_id")
        message = record.get("message") or record.get("data", {}).get("message", {}).get("message") or {}
        content = message.get("content")
        for item in content if isinstance(content, list) else []:
            rename(item, "id")
            rename(item, "tool_use_id")
        rename(record, "parentToolUseID")


def _merged(kept: list[dict[str, Any]], record: dict[str, Any]) -> bool:
    """Fold an assistant record into the one before it when both are of the same turn (Claude Code writes a
    record per content block; its importer joins them into one turn at the later record's time)."""
    last = kept[-1] if kept else None
    if not (last and record.get("type") == last.get("type") == "assistant"
            and all(record.get(k) == last.get(k) for k in ("sessionId", "isSidechain", "agentId"))):
        return False
    last["message"]["content"] += record["message"]["content"]
    last["timestamp"] = record.get("timestamp") or last.get("timestamp")
    return True


if __name__ == "__main__":
    for name in sys.argv[2:]:
        print(trim(Path(name), Path(sys.argv[1])))
