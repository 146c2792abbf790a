"""The server's MCP prompts: the two things users start by hand, as slash commands in their client.

`talk` starts a spoken conversation (the agent uses converse for every turn) and `dictate` takes
down what the user says. Clients such as Claude Code show a server's prompts as commands
(/mcp__mcp-listen__talk); an agent that is told once, at the start, how to use the tools keeps
using them, where an agent left to the tool descriptions drifts back to typing. mcp-free: the
adapter (server/app.py) turns these into the SDK's types.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp_listen.errors import InvalidArgument

MAX_PROMPT_ARGUMENT_CHARS = 500
"""A prompt argument is a topic or a file name, not a document."""


@dataclass(frozen=True)
class PromptSpec:
    name: str
    title: str
    description: str
    argument: str
    """Its one optional argument's name."""
    argument_description: str
    speaks: bool
    """Needs speak_text/converse: listed only where Piper is installed."""

    def text(self, value: str | None) -> str:
        """The message that starts it, with the argument (checked) worked in."""
        return _TEXTS[self.name](_checked(self.argument, value))


def _talk(topic: str | None) -> str:
    start = f"Let's talk about {topic}." if topic else "Let's talk."
    return (
        f"{start} We are having a spoken conversation through mcp-listen: I hear you and you hear me.\n\n"
        "- For every turn, call the converse tool with what you say as `text`: it says it aloud and returns my "
        "answer as `transcription`. Do not write your answer as text instead.\n"
        "- Keep what you say short: one to three sentences, plain words, no markdown, lists, code or URLs (they "
        "sound wrong). Say long content (code, tables, documents) only when I ask for it, and then offer to "
        "show it as text instead.\n"
        "- If `transcription` is null: with `speech_detected` false I said nothing (ask once whether I am "
        "still there, then stop); with true I was unclear (ask me to repeat).\n"
        "- When I say goodbye or that we are done, answer with speak_text (a short goodbye) and stop calling "
        "converse.\n\n"
        "Start now: greet me in one short sentence with converse."
    )


def _dictate(destination: str | None) -> str:
    where = f"Write it to {destination}." if destination else "Write it down here as text."
    return (
        'Take my dictation through mcp-listen. Call the transcribe_voice tool with end_of_turn "smart" and '
        "duration_ms 600000 (ten minutes) so that pauses to think do not end it, and tell me to start "
        f"speaking before you call it. {where}\n\n"
        "- Write what I said, not a summary: fix only obvious transcription slips and punctuation; keep my "
        "wording.\n"
        '- Spoken commands such as "new paragraph", "full stop" or "comma" are formatting, not words.\n'
        "- When the result comes, show me the text and ask whether to continue; call transcribe_voice again "
        "for the next part and append it.\n"
        "- If `transcription` is null, tell me what `speech_detected` means (false: nothing was heard, true: "
        "unclear) and offer to try again."
    )


_TEXTS = {"talk": _talk, "dictate": _dictate}

PROMPTS = (
    PromptSpec(
        name="talk",
        title="Talk with me",
        description="A spoken conversation: the agent answers aloud and hears your reply (converse), turn by turn.",
        argument="topic",
        argument_description="What to talk about (optional).",
        speaks=True,
    ),
    PromptSpec(
        name="dictate",
        title="Take my dictation",
        description="Listen to your dictation (transcribe_voice) and write it down, word for word.",
        argument="destination",
        argument_description="Where to write it: a file name, or empty for the chat (optional).",
        speaks=False,
    ),
)


def find(name: str) -> PromptSpec:
    for spec in PROMPTS:
        if spec.name == name:
            return spec
    known = ", ".join(p.name for p in PROMPTS)
    raise InvalidArgument(f"Unknown prompt '{name}'. Prompts: {known}.")


def _checked(name: str, value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    if len(value) > MAX_PROMPT_ARGUMENT_CHARS or any(ord(c) < 32 for c in value):
        raise InvalidArgument(
            f"Invalid {name}: expected at most {MAX_PROMPT_ARGUMENT_CHARS} characters on one line, without "
            f"control characters; got {len(value)} characters."
        )
    return value.strip()
