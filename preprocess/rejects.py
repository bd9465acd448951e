"""The one exception a conversion worker turns into a line of rejects.jsonl."""


class RejectedImage(Exception):
    """The file cannot become a sample; the message is the reason listed in rejects.jsonl."""
