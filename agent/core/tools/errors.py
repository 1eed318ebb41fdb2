"""The one error a tool raises for the model to hear about (the tools' helpers raise it too, so it sits
below agent.core.tools.base, which names their types)."""


class ToolError(Exception):
    """A failure reported to the model as `Error: <message>`; the loop goes on."""
