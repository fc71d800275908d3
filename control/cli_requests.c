/*
 * The request messages sluicectl sends, built from the parsed arguments:
 * hello, subscribe, and each command's request (sl_proto messages the
 * caller frees).
 */
#include "cli.h"

#include <string.h>

void
sl_cli_build_hello(const char *key, sl_proto_message_t *out)
{
    sl_proto_message_init(out, SL_PROTO_MESSAGE_HELLO);
    out->hello.protocol = SL_PROTO_VERSION;
    out->hello.key = sl_xstrdup(key);
    out->hello.client = sl_xstrdup(SL_CLI_CLIENT_NAME);
}

void
sl_cli_build_put_config(uint32_t req, const char *yaml, uint64_t revision, sl_proto_message_t *out)
{
    sl_proto_message_init(out, SL_PROTO_MESSAGE_PUT_CONFIG);
    out->put_config.req = req;
    out->put_config.yaml = sl_xstrdup(yaml);
    out->put_config.expect_revision = revision;
}

void
sl_cli_build_subscribe(const sl_cli_args_t *a, uint32_t req, sl_proto_message_t *out)
{
    sl_proto_message_init(out, SL_PROTO_MESSAGE_SUBSCRIBE);
    out->subscribe.req = req;
    out->subscribe.topics = sl_xcalloc(2, sizeof(sl_proto_topic_t));
    out->subscribe.topics[out->subscribe.topics_len++] = SL_PROTO_TOPIC_EVENTS;
    if (a->topic_providers)
        out->subscribe.topics[out->subscribe.topics_len++] = SL_PROTO_TOPIC_PROVIDERS;
}

/* A copy of the limits to send (none for limits clear), with their number in *len. */
static sl_proto_limit_t *
copy_limits(const sl_cli_args_t *a, size_t *len)
{
    *len = 0;
    if (a->command != SL_CLI_LIMITS_SET || a->limits_len == 0)
        return NULL;
    sl_proto_limit_t *l = sl_xcalloc(a->limits_len, sizeof *l);
    memcpy(l, a->limits, a->limits_len * sizeof *l);
    *len = a->limits_len;
    return l;
}

static char *
dup_or_null(const char *s)
{
    return s != NULL ? sl_xstrdup(s) : NULL;
}

int
sl_cli_build_request(const sl_cli_args_t *a, uint32_t req, uint64_t now_ms, const char *yaml,
                     sl_proto_message_t *out)
{
    switch (a->command) {
    case SL_CLI_EVENTS:
        sl_cli_build_subscribe(a, req, out);
        return 0;
    case SL_CLI_PROVIDERS:
        sl_proto_message_init(out, SL_PROTO_MESSAGE_GET_PROVIDERS);
        out->get_providers.req = req;
        return 0;
    case SL_CLI_INSTANCES:
        sl_proto_message_init(out, SL_PROTO_MESSAGE_GET_INSTANCES);
        out->get_instances.req = req;
        return 0;
    case SL_CLI_IN_FLIGHT:
        sl_proto_message_init(out, SL_PROTO_MESSAGE_GET_IN_FLIGHT);
        out->get_in_flight.req = req;
        return 0;
    case SL_CLI_HISTORY: {
        sl_proto_message_init(out, SL_PROTO_MESSAGE_HISTORY);
        sl_proto_history_msg_t *h = &out->history;
        h->req = req;
        h->since_ms = a->since_ms == 0 ? 0 : (a->since_ms < now_ms ? now_ms - a->since_ms : 0);
        h->limit = a->limit;
        h->filter.client = dup_or_null(a->client);
        h->filter.provider = dup_or_null(a->provider);
        h->filter.model = dup_or_null(a->model);
        h->filter.has_status = a->has_status;
        h->filter.status = a->status;
        h->cursor = dup_or_null(a->cursor);
        return 0;
    }
    case SL_CLI_LIMITS_SET:
    case SL_CLI_LIMITS_CLEAR:
        if (a->client != NULL) {
            sl_proto_message_init(out, SL_PROTO_MESSAGE_SET_KEY_LIMITS);
            out->set_key_limits.req = req;
            out->set_key_limits.client = sl_xstrdup(a->client);
            out->set_key_limits.limits = copy_limits(a, &out->set_key_limits.limits_len);
        } else {
            sl_proto_message_init(out, SL_PROTO_MESSAGE_SET_PROVIDER_LIMITS);
            out->set_provider_limits.req = req;
            out->set_provider_limits.provider = sl_xstrdup(a->provider);
            out->set_provider_limits.limits = copy_limits(a, &out->set_provider_limits.limits_len);
        }
        return 0;
    case SL_CLI_PAUSE:
        sl_proto_message_init(out, SL_PROTO_MESSAGE_PAUSE_PROVIDER);
        out->pause_provider.req = req;
        out->pause_provider.provider = sl_xstrdup(a->provider);
        out->pause_provider.until_ms = a->pause_ms == 0 ? 0 : now_ms + a->pause_ms;
        return 0;
    case SL_CLI_RESUME:
        sl_proto_message_init(out, SL_PROTO_MESSAGE_RESUME_PROVIDER);
        out->resume_provider.req = req;
        out->resume_provider.provider = sl_xstrdup(a->provider);
        return 0;
    case SL_CLI_CANCEL:
        sl_proto_message_init(out, SL_PROTO_MESSAGE_CANCEL_REQUEST);
        out->cancel_request.req = req;
        out->cancel_request.id = a->id;
        return 0;
    case SL_CLI_CONFIG_PUT:
    case SL_CLI_CONFIG_GET:
        if (a->command == SL_CLI_CONFIG_PUT && a->has_revision) {
            sl_cli_build_put_config(req, yaml != NULL ? yaml : "", a->revision, out);
            return 0;
        }
        /* config put without --revision learns the revision first. */
        sl_proto_message_init(out, SL_PROTO_MESSAGE_GET_CONFIG);
        out->get_config.req = req;
        return 0;
    default:
        memset(out, 0, sizeof *out);
        return -1;
    }
}
