"""recur's pages inside Flower: the Scheduled page's route, and its link in Flower's navbar.

Flower (a tornado application) takes its routes from ``flower.urls.handlers`` and
its settings from ``flower.urls.settings`` when ``recur flower`` builds the app, so
the route is added to that list, before Flower's catch-all 404 (its
``--url-prefix`` rewrite then applies to it as to Flower's own). Every Flower page
renders the navbar from Flower's ``navbar.html``; the template loader set here
serves that file with a "Scheduled" item after "Broker" (left as it is, the page
still at its URL, should a Flower release change the markup), and recur's own
templates from ``tasks/cli/templates``. Templates keep tornado's autoescape.
"""

from __future__ import annotations

import re
from pathlib import Path

from tornado import template, web
from tornado.routing import URLSpec

TEMPLATES = Path(__file__).resolve().parent / "templates"
#: Where the Scheduled item goes: right after the Broker item.
NAV_ANCHOR = re.compile(r">Broker</a>\s*</li>")
NAV_ITEM = """
        <li class="nav-item">
          <a class="nav-link{% if active_tab == 'scheduled' %} active{% end %}"
            href="{{ reverse_url('recur-scheduled') }}"
            {% if active_tab == 'scheduled' %}aria-current="page"{% end %}>Scheduled</a>
        </li>"""


def with_nav_item(navbar: str) -> str:
    """Flower's navbar with the Scheduled item (unchanged if the anchor is gone)."""
    return NAV_ANCHOR.sub(lambda m: m.group(0) + NAV_ITEM, navbar, count=1)


class Templates(template.Loader):
    """Flower's templates, recur's own beside them, and the navbar with its item."""

    def _create_template(self, name: str) -> template.Template:
        own = TEMPLATES / name
        if own.is_file():
            return template.Template(own.read_bytes(), name=name, loader=self)
        if name == "navbar.html":
            text = with_nav_item((Path(self.root) / name).read_text(encoding="utf-8"))
            return template.Template(text, name=name, loader=self)
        return super()._create_template(name)


def install() -> None:
    """Add the Scheduled route and the template loader to Flower (idempotent)."""
    from flower import urls

    from tasks.cli.flower_scheduled import ROUTE, ScheduledView

    if any(isinstance(h, URLSpec) and h.name == ROUTE for h in urls.handlers):
        return
    last = next((i for i, h in enumerate(urls.handlers)
                 if isinstance(h, tuple) and h[0] == r".*"), len(urls.handlers))
    urls.handlers.insert(last, web.url(r"/scheduled", ScheduledView, name=ROUTE))
    urls.settings["template_loader"] = Templates(urls.settings["template_path"])
