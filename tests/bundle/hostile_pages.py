"""What a stranger puts in a bundle's report.html, README.md or figures to make a reviewer's browser run a
script or send a request (docs/security.md, rule 4; issue #35). Shared by the verify tests, the headless
Chromium test and the adversarial corpus (tests/adversarial/cases_html.py).

Each fragment of ACTIVE, placed before `</body>` of a report opened as a file, makes Chromium run a script or
load something from `{u}` (a URL the test serves on the loopback interface and counts requests to). Several
of them passed the allow-list `kit verify` used before (a parse with Python's html.parser and a text search of
the style sheet: OLD_ALLOW_LIST_MISSED), which is why the rule no longer reads a stranger's markup at all.
"""

from __future__ import annotations

ACTIVE = {
    "script": "<script>document.title='RAN';fetch('{u}/script')</script>",
    "event handler": '<img src="data:image/png;base64,AAAA" onerror="fetch(\'{u}/handler\')">',
    "external image": '<img src="{u}/image">',
    "style sheet url()": "<style>body{{background:url({u}/css-url)}}</style>",
    "style sheet url() spelt with a CSS escape": "<style>body{{background:u\\72l({u}/css-escape)}}</style>",
    "style sheet @import spelt with a CSS escape": "<style>@\\69mport '{u}/css-import';</style>",
    "style sheet image-set()": "<style>body{{background-image:image-set('{u}/image-set' 1x)}}</style>",
    "a style inside a title (RCDATA to a browser)":
        "<title><style></title><img src=\"data:,\" onerror=\"fetch('{u}/title-style')\"></style>",
    "noscript ends inside an attribute": '<noscript><p title="</noscript><img src=\'{u}/noscript\'>"></noscript>',
    "textarea": "<textarea></textarea><img src=\"{u}/textarea\">",
    "svg style is not raw text": "<svg><style><img src=\"{u}/svg-style\"></style></svg>",
    "meta refresh": '<meta http-equiv="refresh" content="0;url={u}/refresh">',
    "stylesheet link": '<link rel="stylesheet" href="{u}/link">',
}
OLD_ALLOW_LIST_MISSED = ("style sheet url() spelt with a CSS escape", "style sheet @import spelt with a CSS escape",
                         "style sheet image-set()", "a style inside a title (RCDATA to a browser)")
# not active, but the allow-list raised on them (urlsplit's ValueError): a traceback instead of a verdict
UNPARSEABLE = {
    "link to an unparseable URL": '<a href="http://[">x</a>',
    "link to an unparseable IPv6 host": '<a href="//[::1">x</a>',
}
SVG_FIGURE = ('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><script>fetch("{u}/svg-figure")'
              '</script><rect width="10" height="10" fill="#d66018"/></svg>')
README_RAW = {
    "script": "<script>fetch('{u}/readme')</script>",
    "image": '<img src="{u}/readme-image">',
    "markdown image": "![x]({u}/readme-md-image)",
}
LOOPBACK = "http://127.0.0.1:9"  # where the fragments point when no test server counts the requests


def fragment(text: str, base: str = LOOPBACK) -> str:
    return text.format(u=base)
