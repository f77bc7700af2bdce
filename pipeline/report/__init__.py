"""``prep report``: one self-contained HTML page of charts about a run and its mixture.

``svg`` draws, ``collect``/``ledger``/``lengths``/``scores``/``mixture`` gather the
numbers with bounded memory, ``sections`` pairs them into captioned charts, ``html`` lays
out the page.
"""

from pipeline.report.html import ReportError, render_report, write_report

__all__ = ["ReportError", "render_report", "write_report"]
