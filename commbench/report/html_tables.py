"""report.html's tables, made to fit the page whatever their column count: header text and long cells wrap at spaces,
short cells (a marker such as "◀ best", a CI "489.5–1024.7") never break, and a table whose narrowest layout would
still be wider than the page is split into parts of whole columns, each repeating the columns that name its rows. A
table that scrolls sideways hides its last columns (#wrong, best) behind a scrollbar, where nobody reads them."""

import html
import math

import pandas as pd

PAGE_PX = 1200
"""The widest the page's text gets (body's max-width in render._STYLE): at 1400 px and wider every part fits."""
FONT_PX = 13.6  # the tables' font: 0.85 × 16 px
CHAR_PX = 0.56 * FONT_PX
"""One character's width, on the high side: Chromium's narrowest layouts of the report's real tables came out 5-10 %
narrower than this estimates (digits and lower case are about 0.5 em; bold headers a little wider). A part estimated
to fit fits, with room to spare (the body's margins) at 1400 px; one that would just fit splits a column early."""
CELL_PX = 16  # a cell's padding (0.5 em each side), border and rounding
NO_BREAK_CHARS = 16
"""A cell at most this long stays on one line ("◀ best", "0 (2 unchecked)"); a longer one wraps at its spaces."""
LONGEST_WORD_CHARS = 24
"""Beyond this a word (a path, a commit hash) may break anywhere, so it counts as this long."""
LABEL_SHARE = 0.4
"""At most this share of the page goes to the columns repeated in every part: the rest carries the figures."""


def fitted_tables(frame: pd.DataFrame, *, classes: str, index: bool = False) -> str:
    """The frame as one <table>, or as several when it cannot fit PAGE_PX. index=True shows the frame's index as
    each row's header (repeated in every part); otherwise the leading text columns, which name a row, are repeated
    (as many as fit LABEL_SHARE of the page). Cells are escaped; missing ones are written '-'."""
    columns = [[_text(value) for value in frame.iloc[:, number]] for number in range(frame.shape[1])]
    headers = [str(name) for name in frame.columns]
    widths = [_min_width([header, *texts]) for header, texts in zip(headers, columns)]
    repeated_width = _min_width([str(frame.index.name or ""), *map(str, frame.index)]) if index else 0.0
    if not index:
        count = _label_columns(frame)
        while count and sum(widths[:count]) > LABEL_SHARE * PAGE_PX:
            count -= 1
        repeated, rest = list(range(count)), list(range(count, len(headers)))
        repeated_width = sum(widths[:count])
    else:
        repeated, rest = [], list(range(len(headers)))
    parts = _split(rest, widths, PAGE_PX - repeated_width)
    # every part but the last is marked "split": the page's style keeps the next part close under it
    return "\n".join(_table(frame, columns, headers, repeated + part, classes=classes if number == len(parts) - 1
                             else f"{classes} split", index=index) for number, part in enumerate(parts))


def _text(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e6 else f"{value:.0f}"  # 5.53, 1120.8, 2048000 (never 2.048e+06)
    return str(value)


def _words(text: str) -> list[str]:
    return [text] if len(text) <= NO_BREAK_CHARS else text.split()


def _min_width(texts: list[str]) -> float:
    """The narrowest a column can get: its longest unbreakable piece, in pixels (an upper estimate)."""
    longest = max((len(word) for text in texts for word in _words(text)), default=1)
    return min(longest, LONGEST_WORD_CHARS) * CHAR_PX + CELL_PX


def _label_columns(frame: pd.DataFrame) -> int:
    """How many leading columns hold text (configuration, collective, impl …): what names a row; else the first."""
    count = 0
    for number in range(frame.shape[1]):
        values = frame.iloc[:, number].dropna()
        if not values.empty and pd.api.types.is_numeric_dtype(values.infer_objects()):
            break
        count += 1
    return min(max(count, 1), frame.shape[1] - 1)


def _split(columns: list[int], widths: list[float], room: float) -> list[list[int]]:
    """Whole columns, in order, into as few parts as fit `room` (at least one column a part)."""
    parts: list[list[int]] = [[]]
    used = 0.0
    for column in columns:
        if parts[-1] and used + widths[column] > room:
            parts.append([])
            used = 0.0
        parts[-1].append(column)
        used += widths[column]
    return parts


def _cell(tag: str, text: str) -> str:
    """A cell whose short text keeps together (the page's style: no wrapping, not even after the dash of
    "489.5–1024.7") and whose long text is marked to wrap at its spaces, its long words breakable every
    LONGEST_WORD_CHARS (<wbr>): the browser's narrowest layout is then the one _min_width estimates."""
    if len(text) <= NO_BREAK_CHARS:
        return f"<{tag}>{html.escape(text)}</{tag}>"
    words = [("<wbr>".join(html.escape(word[start:start + LONGEST_WORD_CHARS])
                            for start in range(0, len(word), LONGEST_WORD_CHARS))) for word in text.split(" ")]
    return f"<{tag} class='wraps'>{' '.join(words)}</{tag}>"


def _table(frame: pd.DataFrame, texts: list[list[str]], headers: list[str], columns: list[int], *, classes: str,
           index: bool) -> str:
    head = ([_cell("th", str(frame.index.name or ""))] if index else []) + [_cell("th", headers[column])
                                                                         for column in columns]
    rows = []
    for position in range(len(frame)):
        row = [_cell("th", str(frame.index[position]))] if index else []
        row += [_cell("td", texts[column][position]) for column in columns]
        rows.append(f"<tr>{''.join(row)}</tr>")
    return (f"<table class='{html.escape(classes)}'><thead><tr>{''.join(head)}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")
