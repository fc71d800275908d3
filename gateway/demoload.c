#define _GNU_SOURCE /* memmem */
/*
 * The demo load generator: a thread per virtual client with blocking
 * sockets, and a reporter thread. Every wait (between requests, for the
 * minute's report) is a timed wait on one condition variable, so stopping
 * is prompt; a request in flight is cut by shutting its socket down.
 */
#include "demoload.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "core/demo_script.h"
#include "core/xalloc.h"
#include "log.h"
#include "worker.h"

#define MAX_STATUSES 16
#define KEEP_BYTES                                                                                           \
    (256 * 1024)           /* of an answer, searched for an in-stream error; the rest is read and dropped */
#define READ_TIMEOUT_S 200 /* a whole answer: longer than wait_secs plus a slow stream */

typedef struct {
    int status; /* 0: no answer (connect failure, cut before the head, timeout) */
    uint64_t count;
} status_count_t;

typedef struct {
    uint64_t requests, stream_errors;
    status_count_t statuses[MAX_STATUSES];
    size_t n_statuses;
} stats_t;

typedef struct {
    struct sl_demoload *l;
    unsigned index;
    pthread_t thread;
    int fd; /* the socket in flight, or -1; under l->mu */
} client_t;

struct sl_demoload {
    uint16_t port;
    char *key;
    unsigned n;
    client_t *clients;
    pthread_t reporter;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    bool stopping;
    stats_t minute, total;
};

static unsigned
below(uint64_t *state, unsigned n)
{
    return (unsigned)(sl_demo_draw(state) % n);
}

/* Waits ms on the stop signal; true when stopping. Called with l->mu held. */
static bool
wait_ms(struct sl_demoload *l, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    while (!l->stopping && pthread_cond_timedwait(&l->cv, &l->mu, &ts) != ETIMEDOUT)
        ;
    return l->stopping;
}

/* ---- requests ------------------------------------------------------------------------------------- */

static const struct {
    sl_dialect_t dialect;
    unsigned weight;
    const char *models[3];
} mix[] = {
    {SL_DIALECT_ANTHROPIC, 30, {"claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-1"}},
    {SL_DIALECT_OPENAI_CHAT, 25, {"gpt-4o-mini", "gpt-4.1", "gpt-4o"}},
    {SL_DIALECT_OPENAI_RESPONSES, 15, {"gpt-5", "gpt-5-mini", "gpt-5-codex"}},
    {SL_DIALECT_GEMINI, 15, {"gemini-2.5-flash", "gemini-2.5-pro", "gemini-2.0-flash"}},
    {SL_DIALECT_BEDROCK,
     15,
     {"anthropic.claude-3-5-haiku-20241022-v1:0", "us.anthropic.claude-sonnet-4-20250514-v1:0",
      "anthropic.claude-3-haiku-20240307-v1:0"}},
};

static const char *const questions[] = {
    "What does a sluice gate do?",
    "Explain failover in one paragraph.",
    "Why do APIs answer 429?",
    "Write a haiku about a retry.",
    "How should a client treat Retry-After?",
    "What is a circuit breaker?",
    "Summarise the life of a streamed request.",
    "Why hold a stream until its first token?",
};

/* Appends the request (head and body) a client of dialect d sends for model. */
static void
build_request(const struct sl_demoload *l, sl_dialect_t d, const char *model, bool stream,
              const char *question, sl_strbuf_t *out)
{
    sl_strbuf_t body = {0}, path = {0};
    const char *auth = "authorization: Bearer ";
    switch (d) {
    case SL_DIALECT_ANTHROPIC:
        sl_strbuf_appendf(&path, "/v1/messages");
        sl_strbuf_appendf(
            &body,
            "{\"model\":\"%s\",\"max_tokens\":512,\"stream\":%s,\"messages\":[{\"role\":\"user\","
            "\"content\":\"%s\"}]}",
            model, stream ? "true" : "false", question);
        auth = "x-api-key: ";
        break;
    case SL_DIALECT_OPENAI_CHAT:
        sl_strbuf_appendf(&path, "/v1/chat/completions");
        sl_strbuf_appendf(
            &body, "{\"model\":\"%s\",\"stream\":%s,%s\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}",
            model, stream ? "true" : "false", stream ? "\"stream_options\":{\"include_usage\":true}," : "",
            question);
        break;
    case SL_DIALECT_OPENAI_RESPONSES:
        sl_strbuf_appendf(&path, "/v1/responses");
        sl_strbuf_appendf(&body, "{\"model\":\"%s\",\"stream\":%s,\"input\":\"%s\"}", model,
                          stream ? "true" : "false", question);
        break;
    case SL_DIALECT_GEMINI:
        sl_strbuf_appendf(&path, "/v1beta/models/%s:%s", model,
                          stream ? "streamGenerateContent?alt=sse" : "generateContent");
        sl_strbuf_appendf(&body, "{\"contents\":[{\"role\":\"user\",\"parts\":[{\"text\":\"%s\"}]}]}",
                          question);
        auth = "x-goog-api-key: ";
        break;
    default:
        /* Bedrock: the AWS SDKs send the model id %-encoded, ':' included. */
        sl_strbuf_appendf(&path, "/model/");
        for (const char *m = model; *m; m++) {
            if (*m == ':')
                sl_strbuf_appendf(&path, "%%3A");
            else
                sl_strbuf_append(&path, m, 1);
        }
        sl_strbuf_appendf(&path, "/%s", stream ? "converse-stream" : "converse");
        sl_strbuf_appendf(&body,
                          "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"%s\"}]}],"
                          "\"inferenceConfig\":{\"maxTokens\":512}}",
                          question);
        break;
    }
    sl_strbuf_appendf(
        out,
        "POST %s HTTP/1.1\r\nhost: 127.0.0.1:%u\r\ncontent-type: application/json\r\n"
        "user-agent: sluice-demo-load\r\n%s%s\r\n%scontent-length: %zu\r\nconnection: close\r\n\r\n",
        path.data, l->port, auth, l->key,
        d == SL_DIALECT_ANTHROPIC ? "anthropic-version: 2023-06-01\r\n" : "", body.len);
    sl_strbuf_append(out, body.data, body.len);
    free(body.data);
    free(path.data);
}

/* Whether a 200 answer carries an error event of some dialect (the bytes of formats.md). */
static bool
has_stream_error(const char *body, size_t len)
{
    static const char *const marks[] = {"event: error", "event: response.failed", "data: {\"error\"",
                                        ":exception-type"};
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        if (memmem(body, len, marks[i], strlen(marks[i])) != NULL)
            return true;
    }
    return false;
}

static void
count_status(stats_t *s, int status, bool stream_error)
{
    s->requests++;
    s->stream_errors += stream_error;
    for (size_t i = 0; i < s->n_statuses; i++) {
        if (s->statuses[i].status == status) {
            s->statuses[i].count++;
            return;
        }
    }
    if (s->n_statuses < MAX_STATUSES)
        s->statuses[s->n_statuses++] = (status_count_t){status, 1};
}

/* Sends one request and reads the whole answer; returns its status (0: none) and *stream_error. */
static int
one_request(client_t *c, const char *req, size_t len, bool *stream_error)
{
    struct sl_demoload *l = c->l;
    *stream_error = false;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct timeval tv = {.tv_sec = READ_TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    pthread_mutex_lock(&l->mu);
    bool stop = l->stopping;
    if (!stop)
        c->fd = fd;
    pthread_mutex_unlock(&l->mu);
    int status = 0;
    char *buf = NULL;
    size_t have = 0;
    if (stop)
        goto done;
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons(l->port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        goto done;
    for (size_t off = 0; off < len;) {
        ssize_t n = send(fd, req + off, len - off, MSG_NOSIGNAL);
        if (n <= 0)
            goto done;
        off += (size_t)n;
    }
    buf = sl_xmalloc(KEEP_BYTES);
    for (;;) {
        char scratch[16384];
        char *into = have < KEEP_BYTES ? buf + have : scratch;
        size_t room = have < KEEP_BYTES ? KEEP_BYTES - have : sizeof scratch;
        ssize_t n = recv(fd, into, room, 0);
        if (n <= 0)
            break;
        if (into != scratch)
            have += (size_t)n;
    }
    if (have >= 12 && memcmp(buf, "HTTP/1.", 7) == 0)
        status = atoi(buf + 9);
    if (status == 200)
        *stream_error = has_stream_error(buf, have);
done:
    pthread_mutex_lock(&l->mu);
    c->fd = -1;
    pthread_mutex_unlock(&l->mu);
    close(fd);
    free(buf);
    return status;
}

static void *
client_run(void *arg)
{
    client_t *c = arg;
    struct sl_demoload *l = c->l;
    uint64_t rng = (uint64_t)sl_wall_ms() ^ ((uint64_t)c->index << 40);
    unsigned total_weight = 0;
    for (size_t i = 0; i < sizeof mix / sizeof mix[0]; i++)
        total_weight += mix[i].weight;
    /* Spread the first requests so the clients do not start in step. */
    pthread_mutex_lock(&l->mu);
    bool stop = wait_ms(l, below(&rng, 2000));
    pthread_mutex_unlock(&l->mu);
    for (uint64_t n = 0; !stop; n++) {
        unsigned pick = below(&rng, total_weight);
        size_t i = 0;
        while (pick >= mix[i].weight)
            pick -= mix[i++].weight;
        const char *model = mix[i].models[below(&rng, 3)];
        bool stream = below(&rng, 100) < 85;
        /* A number in the question makes each request its own conversation (no sticky affinity). */
        char question[160];
        snprintf(question, sizeof question, "%s (client %u, question %" PRIu64 ")",
                 questions[below(&rng, sizeof questions / sizeof questions[0])], c->index, n);
        sl_strbuf_t req = {0};
        build_request(l, mix[i].dialect, model, stream, question, &req);
        bool stream_error;
        int status = one_request(c, req.data, req.len, &stream_error);
        free(req.data);
        pthread_mutex_lock(&l->mu);
        if (!l->stopping) {
            count_status(&l->minute, status, stream_error);
            count_status(&l->total, status, stream_error);
        }
        stop = wait_ms(l, 300 + below(&rng, 2701));
        pthread_mutex_unlock(&l->mu);
    }
    return NULL;
}

/* ---- reports -------------------------------------------------------------------------------------- */

static void
log_stats(const char *what, const stats_t *s)
{
    sl_strbuf_t b = {0};
    for (size_t i = 0; i < s->n_statuses; i++) {
        if (s->statuses[i].status == 0)
            sl_strbuf_appendf(&b, "%sno answer x%" PRIu64, i ? ", " : "", s->statuses[i].count);
        else
            sl_strbuf_appendf(&b, "%s%d x%" PRIu64, i ? ", " : "", s->statuses[i].status,
                              s->statuses[i].count);
    }
    sl_log_info("demo-load: %s: %" PRIu64 " requests (%s); %" PRIu64 " ended with an in-stream error", what,
                s->requests, b.data ? b.data : "none", s->stream_errors);
    free(b.data);
}

static void *
reporter_run(void *arg)
{
    struct sl_demoload *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!wait_ms(l, 60000)) {
        stats_t s = l->minute;
        l->minute = (stats_t){0};
        pthread_mutex_unlock(&l->mu);
        log_stats("last minute", &s);
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---- the API -------------------------------------------------------------------------------------- */

static void
stop_threads(struct sl_demoload *l, unsigned started, bool reporter)
{
    pthread_mutex_lock(&l->mu);
    l->stopping = true;
    pthread_cond_broadcast(&l->cv);
    for (unsigned i = 0; i < started; i++) {
        if (l->clients[i].fd >= 0)
            shutdown(l->clients[i].fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&l->mu);
    for (unsigned i = 0; i < started; i++)
        pthread_join(l->clients[i].thread, NULL);
    if (reporter)
        pthread_join(l->reporter, NULL);
}

static void
destroy(struct sl_demoload *l)
{
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l->clients);
    free(l->key);
    free(l);
}

sl_demoload_t *
sl_demoload_start(uint16_t gateway_port, const char *key, unsigned clients)
{
    struct sl_demoload *l = sl_xcalloc(1, sizeof *l);
    l->port = gateway_port;
    l->key = sl_xstrdup(key);
    l->n = clients == 0 ? 1 : clients > SL_DEMOLOAD_MAX_CLIENTS ? SL_DEMOLOAD_MAX_CLIENTS : clients;
    l->clients = sl_xcalloc(l->n, sizeof *l->clients);
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&l->reporter, NULL, reporter_run, l) != 0) {
        destroy(l);
        return NULL;
    }
    for (unsigned i = 0; i < l->n; i++) {
        l->clients[i] = (client_t){.l = l, .index = i + 1, .fd = -1};
        if (pthread_create(&l->clients[i].thread, NULL, client_run, &l->clients[i]) != 0) {
            stop_threads(l, i, true);
            destroy(l);
            return NULL;
        }
    }
    sl_log_info("demo-load: %u virtual client%s calling the gateway on 127.0.0.1:%u", l->n,
                l->n == 1 ? "" : "s", gateway_port);
    return l;
}

uint64_t
sl_demoload_count(sl_demoload_t *l)
{
    pthread_mutex_lock(&l->mu);
    uint64_t n = l->total.requests;
    pthread_mutex_unlock(&l->mu);
    return n;
}

void
sl_demoload_stop(sl_demoload_t *l)
{
    if (l == NULL)
        return;
    stop_threads(l, l->n, true);
    log_stats("in all", &l->total);
    destroy(l);
}
