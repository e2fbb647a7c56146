"""The dashboard: a local web application for the people who run the shared memory (`mnemosync dashboard`).

It is a gRPC client of the server like any agent, with an identity and rights
like any agent's (its own certificate under mTLS), so it shows only what that
identity may read, through the same calls as the CLI: it lives in
`agent_client`, which may use nothing of the server but its core, so it cannot
reach around the contract into the server's store. Server-rendered Jinja2
pages, server-sent events for the live views, plain JavaScript, SVG plots drawn
on the server; templates and static files are package data, nothing comes from
a CDN.
"""
