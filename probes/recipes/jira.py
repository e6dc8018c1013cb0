"""Jira Cloud: an issue by key, and the JQL search for the label the agent puts on the issue.

    jira.issue   GET /rest/api/3/issue/{issueIdOrKey}                    authoritative
    jira.search  GET /rest/api/3/search/jql?jql=project = "P" AND labels = "reconciler-op-ID"
                                                                          lagging, 300 s

The agent creates the issue (`POST /rest/api/3/issue`) with the label
`reconciler-op-<operation id>` in `fields.labels` and, to bind a match to its request, the
issue entity property `reconciler` = `{"operation_id": ..., "request_hash": ...}` in the
create body's `properties` (docs/providers/jira.md has the body). The search finds issues by
the label: labels are in Jira's search index on every site, where an entity property is
searchable by JQL (`issue.property[reconciler].operation_id`) only once an app declares an
index for it. Both reads ask for the property back (`properties=reconciler`) and the match's
request hash is read from it.

Jira has no idempotency key on issue create: a create sent twice is two issues. A create whose
answer was lost can be retried only on a zero, and a zero comes only from the search, which is
eventually consistent: Atlassian documents that `/search/jql` "doesn't provide read-after-write
consistency", with a delay "from a few seconds to minutes". That gives no bound, so the
default lag is the cautious five minutes (as for GitHub's search); lower it only for a site you
measured. `reconcileIssues` (Atlassian's fix) needs the issue id the lost answer never gave.

Anyone who may edit an issue can add the label or set the property, so a match proves the
effect only in an issue the worker's own account created (SPEC section 3): the recipes need
`account`, the Atlassian `accountId` the API token acts as (`GET /rest/api/3/myself`), held
against `fields.creator.accountId`. A label on someone else's issue is a `weak` hint, no zero.

A 404 is never a zero: Jira answers "Issue does not exist or you do not have permission to see
it" to both. Log in with HTTP Basic: the account's email from `username_env` (`JIRA_EMAIL`)
and an API token from `token_env` (`JIRA_API_TOKEN`); `base_url` is the site
(`https://your-domain.atlassian.net`). The search pages with `nextPageToken` and ends where
the page says `isLast: true`; a page that says neither is a cut read.

Sources: https://developer.atlassian.com/cloud/jira/platform/search-and-reconcile/
(consistency, delay, reconcileIssues),
https://developer.atlassian.com/cloud/jira/platform/rest/v3/api-group-issue-search/
(search/jql: nextPageToken, isLast, fields, properties),
https://developer.atlassian.com/cloud/jira/platform/rest/v3/api-group-issues/
(create issue with `properties`; get issue and its 404),
https://developer.atlassian.com/cloud/jira/platform/jira-entity-properties/ (JQL over a
property needs an app's index),
https://developer.atlassian.com/cloud/jira/platform/basic-auth-for-rest-apis/ (email + token).
"""

from __future__ import annotations

from typing import Any

from probes.recipes.recipe import Recipe, by_account
from reconciler.core.domain import Authority

CITE = "https://developer.atlassian.com/cloud/jira/platform/search-and-reconcile/"

#: The label an agent puts on the issue it creates; the search and both reads look for it.
LABEL = "reconciler-op-{operation_id}"
#: The issue entity property carrying the operation id and the request hash.
PROPERTY = "reconciler"

_READ = {"fields": "labels,creator,project", "properties": PROPERTY}
_COMMON: dict[str, Any] = {
    "token_env": "JIRA_API_TOKEN", "username_env": "JIRA_EMAIL", "ref": "key",
    "hash": f"properties.{PROPERTY}.request_hash", "member": {"fields.labels": LABEL},
    "headers": {"Accept": "application/json"}}


#: `account`: the accountId whose issues prove an effect; anyone may label an issue.
_by_account = by_account(
    "fields.creator.accountId",
    "the Atlassian accountId the API token acts as, from GET /rest/api/3/myself",
    "a label anyone who may edit an issue can add proves an effect only on an issue the "
    "worker's own account created")


RECIPES: dict[str, Recipe] = {
    "jira.issue": Recipe({
        "path": "/rest/api/3/issue/{correlation[issue_key]}", "params": _READ, "item": "",
        **_COMMON, "authority": "authoritative"}, Authority.AUTHORITATIVE,
        "https://developer.atlassian.com/cloud/jira/platform/rest/v3/api-group-issues/"
        "#api-rest-api-3-issue-issueidorkey-get", adapt=_by_account),
    "jira.search": Recipe({
        "path": "/rest/api/3/search/jql",
        "params": {"jql": f'project = "{{correlation[project]}}" AND labels = "{LABEL}"',
                   "maxResults": "100", **_READ},
        "items": "issues", **_COMMON,
        "pagination": {"style": "cursor", "next": "nextPageToken", "param": "nextPageToken",
                       "last_flag": "isLast"},
        "authority": "lagging"}, Authority.LAGGING, CITE, least_lag_s=300.0,
        adapt=_by_account),
}
