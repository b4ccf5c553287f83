"""Walking NextToken pages (CMS DescribeMetricList/Last, ECS DescribeInstances and history events) with an
end guaranteed: a server that keeps answering a NextToken must not hold a tick, or a diagnosis, for ever.

A walk ends when the answer carries no NextToken. It fails as ``IncompleteListing`` (the caller has part of
a list and must not act on it as the whole) when a token comes back that was already followed (the walk
would loop), when ``MAX_EMPTY_PAGES`` pages running carry no row but a fresh token (a cursor that moves over
nothing), or past ``MAX_PAGES`` pages. Real walks are far shorter: a metric read of 50 instances with 8 GPUs
over 10 minutes at 15 s is 16,000 rows, 12 pages of CMS's 1,440; one empty last page with a token is seen.
"""

from __future__ import annotations

from fleet.cloud.errors import IncompleteListing

MAX_PAGES = 1000
MAX_EMPTY_PAGES = 5


class TokenWalk:
    """The state of one NextToken walk: ``follow`` each answer's token, and continue while it returns one."""

    def __init__(self, action: str, max_pages: int | None = None, max_empty: int | None = None) -> None:
        self.action = action
        self.max_pages = MAX_PAGES if max_pages is None else max_pages
        self.max_empty = MAX_EMPTY_PAGES if max_empty is None else max_empty
        self.pages = 0
        self.empty_run = 0
        self._seen: set[str] = set()

    def follow(self, token: str | None, rows: int) -> str | None:
        """The token to ask for next after a page of ``rows`` rows answered ``token``; None when done."""
        self.pages += 1
        self.empty_run = 0 if rows else self.empty_run + 1
        if not token:
            return None
        if token in self._seen:
            self._fail(f"NextToken {token!r} came back again after {self.pages} pages")
        if self.empty_run >= self.max_empty:
            self._fail(f"{self.empty_run} pages running carried no rows but a new NextToken")
        if self.pages >= self.max_pages:
            self._fail(f"still answering a NextToken after {self.pages} pages")
        self._seen.add(token)
        return token

    def _fail(self, why: str) -> None:
        raise IncompleteListing("IncompleteListing", f"{why}: the listing is not trusted", action=self.action)
