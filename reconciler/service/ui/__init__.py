"""The operator console at /ui: server-rendered pages (Jinja2 templates shipped in the
package, no CDN, no build step) for what waits on a human, and the decisions to make on it.

    access    who is an operator (the one place the credential check lives), sessions, CSRF
    queue     "Needs a human": operations and runs, oldest first, with why and for how long
    timeline  an operation's dispatches, probes, lag window, deadline and resolution as SVG
    routes    the pages and the decide forms
"""
