/*
 * What a hop sends upstream (behaviour.md §3, the per-hop pipeline): the
 * candidate's request head (the dialect's path, the provider's credential
 * and headers), the body with the candidate's model name and, when a limit
 * needs it, a Chat stream's usage request; Bedrock's SigV4 signature.
 */
#include "req.h"

/*
 * The body for this hop: the client's, or a copy with the upstream's model
 * name (model_map) and, for a Chat stream whose usage a limit needs, with
 * `stream_options.include_usage` (then the extra usage chunk is dropped on
 * the way back unless the client asked for it).
 */
static h2o_iovec_t
body_for_hop(request_t *r, const char *model, bool needs_usage)
{
    sl_body_edit_t edits[2];
    size_t n = 0;
    sl_strbuf_t quoted = {0};
    bool rename =
        r->in.endpoint.model[0] == '\0' && strcmp(model, r->in.model) != 0 && r->in.fields.model.len > 0;
    if (rename) {
        sl_strbuf_append(&quoted, "\"", 1);
        for (const char *p = model; *p; p++) {
            if (*p == '"' || *p == '\\')
                sl_strbuf_appendf(&quoted, "\\%c", *p);
            else if ((unsigned char)*p < 0x20)
                sl_strbuf_appendf(&quoted, "\\u%04x", *p);
            else
                sl_strbuf_append(&quoted, p, 1);
        }
        sl_strbuf_append(&quoted, "\"", 1);
        edits[n++] =
            (sl_body_edit_t){r->in.fields.model.off, r->in.fields.model.len, quoted.data, quoted.len};
    }
    r->strip_usage_chunk = needs_usage && sl_dialect_def(r->in.endpoint.dialect)->asks_for_usage &&
                           r->in.stream &&
                           sl_body_ask_for_usage(r->in.body, r->in.body_len, &r->in.fields, &edits[n]);
    if (r->strip_usage_chunk)
        n++;
    size_t len = 0;
    char *body = sl_body_apply(r->in.body, r->in.body_len, edits, n, &len);
    free(sl_strbuf_finish(&quoted));
    free(r->body_copy);
    r->body_copy = body;
    return body != NULL ? h2o_iovec_init(body, len) : h2o_iovec_init(r->in.body, r->in.body_len);
}

sl_head_status_t
sl__build_hop_request(request_t *r, size_t cand, sl_strbuf_t *head, sl_upstream_head_t *info)
{
    sl_headers_t headers = sl_request_headers(r->req);
    r->body = body_for_hop(r, r->cands[cand].model, r->acct.hop_needs_usage);
    sl_upstream_request_t ureq = {
        .method = "POST",
        .target = r->req->path.base,
        .target_len = r->req->path.len,
        .model = r->cands[cand].model,
        .headers = &headers,
        .body_len = r->body.len,
    };
    sl_head_status_t st =
        sl_dialect_upstream_head(&r->snapshot->heads[r->cands[cand].provider], &ureq, head, info);
    char traceparent[96];
    if (st == SL_HEAD_OK && sl__trace_hop_header(r, traceparent, sizeof(traceparent))) {
        head->len -= 2; /* the blank line that ends the head comes after it */
        sl_strbuf_append_str(head, traceparent);
        sl_strbuf_append(head, "\r\n", 2);
    }
    return st;
}

/*
 * Bedrock without a key: the head is signed with SigV4, with the provider's
 * `aws` credentials or else the standard AWS_* environment, both resolved
 * at config load (config.md).
 */
bool
sl__sign_for_aws(request_t *r, const sl_provider_t *p, const sl_upstream_head_t *info)
{
    sl_aws_credentials_t creds = {p->aws_access_key_id, p->aws_secret_access_key, p->aws_session_token};
    if (creds.access_key_id == NULL || creds.secret_access_key == NULL || p->region == NULL)
        return false;
    return sl_sigv4_sign_head(&r->head, info, r->body.base, r->body.len, p->region, &creds, sl_wall_ms());
}
