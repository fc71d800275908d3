#include "runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bus.h"
#include "cluster.h"
#include "cluster_view.h"
#include "shared_state.h"
#include "core/cluster_msg.h"
#include "core/mask.h"
#include "core/xalloc.h"
#include "yamledit.h"
#include "log.h"
#include "worker.h"

struct sl_runtime {
    pthread_mutex_t lock; /* serialises changes; guards everything below but the holder */
    char *path;           /* the config file; NULL = the embedded default */
    sl_snapshot_holder_t holder;
    sl_upstreams_t *upstreams;
    sl_limiter_t *limiter;
    sl_gateway_t *gw;
    char *text; /* the running config as written (the file's bytes) */
    size_t text_len;
    uint64_t revision;
    /* A cluster's: the last config pushed anywhere that this instance applied, made or noted */
    uint64_t pushed_revision;
    char pushed_origin[192];
    bool safe_mode;
    sl_msgs_t problems; /* safe mode: the file's problems */
    struct timespec file_mtime;
    off_t file_size;
    sl_listen_t gateway_listen, control_listen; /* as started; deep copies */
    uint64_t max_body_at_start;                 /* h2o's body limits are set from it once (server.c) */
    sl_store_where_t store; /* where the request DB is, every string owned; path and url NULL without one */
    char *control_key;
    sl_bus_batch_t batch; /* events of changes, flushed at once */
    sl_shared_call_t
        operator_call; /* an operator's pause or resume, announced when the shared state answers */
};

/* ---- events ------------------------------------------------------------------------------------- */

static void
emit(sl_runtime_t *rt, sl_proto_event_t *ev)
{
    if (!sl_bus_is_active(rt->gw->bus)) {
        sl_proto_event_free(ev);
        return;
    }
    sl_bus_emit(&rt->batch, ev);
    sl_bus_flush(rt->gw->bus, &rt->batch);
}

/* LimitsChanged; the limiter calls it while binding, under rt->lock. */
static void
announce_limits_changed(void *ctx, const sl_limit_set_t *set, const sl_limit_t *limits, size_t n)
{
    sl_runtime_t *rt = ctx;
    sl_log_info("usage limits of %s %s replaced (%zu limit%s)",
                set->kind == SL_BUCKET_CLIENT ? "key" : "upstream", set->name, n, n == 1 ? "" : "s");
    sl_proto_event_t ev;
    emit(rt, sl_bus_limits_changed(&ev, sl_wall_ms(),
                                   set->kind == SL_BUCKET_CLIENT ? SL_PROTO_LIMIT_TARGET_CLIENT
                                                                 : SL_PROTO_LIMIT_TARGET_PROVIDER,
                                   set->name, limits, n));
}

/* Past usage for limits that start counting (limiter.h), from the request DB's buckets. */
static void
read_usage_history(void *ctx, int64_t since_ms, sl_usage_cb add, void *add_ctx)
{
    sl_runtime_t *rt = ctx;
    if (rt->store.path == NULL && rt->store.url == NULL)
        return;
    /* What the recorder still holds in memory counts too. */
    if (rt->gw->recorder != NULL)
        sl_recorder_flush(rt->gw->recorder);
    char err[256];
    if (sl_recorder_load_usage(&rt->store, since_ms, add, add_ctx, err, sizeof(err)) < 0)
        sl_log_warn("usage limits: the stored usage could not be read (%s); windows start empty", err);
}

/* ---- files -------------------------------------------------------------------------------------- */

/* The whole file (NUL-terminated, caller frees), or NULL with errno set. */
static char *
read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *buf = sl_xmalloc(SL_CONFIG_MAX_FILE_BYTES + 2);
    size_t n = fread(buf, 1, SL_CONFIG_MAX_FILE_BYTES + 1, f);
    bool bad = ferror(f) != 0 || n > SL_CONFIG_MAX_FILE_BYTES;
    fclose(f);
    if (bad) {
        free(buf);
        errno = EFBIG;
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static void
remember_stat(sl_runtime_t *rt)
{
    struct stat st;
    if (rt->path != NULL && stat(rt->path, &st) == 0) {
        rt->file_mtime = st.st_mtim;
        rt->file_size = st.st_size;
    }
}

/* Replaces the file's contents atomically (a temporary file renamed over it), keeping its mode. */
static int
write_text(const char *path, const char *text, size_t len, char *err, size_t err_size)
{
    struct stat st;
    mode_t mode = stat(path, &st) == 0 ? (st.st_mode & 07777) : 0600;
    size_t tmp_len = strlen(path) + 16;
    char *tmp = sl_xmalloc(tmp_len);
    snprintf(tmp, tmp_len, "%s.sluice-tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    bool ok = fd >= 0;
    for (size_t off = 0; ok && off < len;) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        ok = w > 0;
        off += ok ? (size_t)w : 0;
    }
    ok = ok && fsync(fd) == 0;
    if (fd >= 0 && close(fd) != 0)
        ok = false;
    ok = ok && rename(tmp, path) == 0;
    if (!ok) {
        snprintf(err, err_size, "%s", strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return ok ? 0 : -1;
}

/* ---- applying a configuration ------------------------------------------------------------------- */

/* The snapshot's shared parts for config: upstream state and usage limits, carried over by name. */
static void
publish(sl_runtime_t *rt, sl_config_t *config, bool safe_mode, bool first)
{
    /* The exporter first: a request under the new config may end with spans at once. */
    sl_tracer_configure(rt->gw->tracer, config->otlp_endpoint, config->service_name);
    sl_upstream_t **ups = sl_upstreams_bind(rt->upstreams, config);
    sl_limit_sets_t sets = sl_limiter_bind(rt->limiter, config, sl_wall_ms());
    if (first)
        sl_snapshot_holder_init(&rt->holder, config, ups, sets, safe_mode);
    else
        sl_snapshot_publish(&rt->holder, config, ups, sets, safe_mode);
}

static void
log_auth_hold_cleared(const sl_upstream_t *up)
{
    sl_log_info("upstream %s: the config changed, its rejected credentials are tried again", up->name);
}

static sl_msg_t
msg_copy(const sl_msg_t *m)
{
    sl_msg_t c = {.code = m->code, .nargs = m->nargs, .text = sl_xstrdup(m->text)};
    for (size_t i = 0; i < m->nargs; i++)
        c.args[i] = (sl_msg_arg_t){m->args[i].name, sl_xstrdup(m->args[i].value)};
    return c;
}

static void
msgs_copy(sl_msgs_t *dst, const sl_msgs_t *src)
{
    for (size_t i = 0; i < src->len; i++)
        sl_msgs_push(dst, msg_copy(&src->items[i]));
}

static const char *
source_name(const sl_runtime_t *rt)
{
    return rt->path != NULL ? rt->path : "the built-in configuration";
}

/*
 * THE way a configuration changes: text is validated; valid, it becomes
 * the running config (requests in flight keep theirs; upstream, breaker,
 * throttle and usage state carry over by name), the revision goes up (to
 * at_least, if that is more: a cluster's shared revision) and
 * ConfigReloaded is emitted; invalid, nothing changes, every problem goes
 * to *problems (may be NULL) and ConfigRejected is emitted. Takes text.
 * Called with rt->lock held. Returns 0 when applied.
 */
static int
apply_text(sl_runtime_t *rt, char *text, size_t len, sl_proto_config_source_t source, sl_msgs_t *problems,
           uint64_t at_least)
{
    sl_config_result_t res = sl_config_parse(text, len, rt->path, sl_config_env_system());
    for (size_t i = 0; i < res.warnings.len; i++)
        sl_log_warn("%s [%s]", res.warnings.items[i].text, sl_code_slug(res.warnings.items[i].code));
    sl_proto_event_t ev;
    if (res.errors.len > 0) {
        for (size_t i = 0; i < res.errors.len; i++)
            sl_log_error("%s [%s]", res.errors.items[i].text, sl_code_slug(res.errors.items[i].code));
        char count[24];
        snprintf(count, sizeof(count), "%zu", res.errors.len);
        sl_msg_t m = sl_msg_make(SL_CODE_CONFIG_REJECTED, "path", source_name(rt), "count", count, NULL);
        sl_log_error("%s [%s]", m.text, sl_code_slug(m.code));
        sl_msg_free(&m);
        emit(rt, sl_bus_config_rejected(&ev, sl_wall_ms(), source, &res.errors));
        if (problems != NULL)
            msgs_copy(problems, &res.errors);
        sl_config_result_free(&res);
        free(text);
        return -1;
    }
    const sl_listen_t *g = &res.config->gateway;
    if (strcmp(g->bind, rt->gateway_listen.bind) != 0 ||
        (g->port != rt->gateway_listen.port && rt->gateway_listen.port != 0))
        sl_log_warn("listen.gateway changed: it takes effect at the next restart");
    if (res.config->max_body_bytes > rt->max_body_at_start)
        sl_log_warn(
            "limits.max_body_bytes grew to %llu: bodies over %llu, its value at start, are still refused "
            "until the next restart",
            (unsigned long long)res.config->max_body_bytes, (unsigned long long)rt->max_body_at_start);
    sl_config_t *config = res.config;
    res.config = NULL;
    sl_config_result_free(&res);
    bool was_safe = rt->safe_mode;
    rt->safe_mode = false;
    sl_msgs_clear(&rt->problems);
    publish(rt, config, false, false);
    free(rt->text);
    rt->text = text;
    rt->text_len = len;
    rt->revision = rt->revision + 1 > at_least ? rt->revision + 1 : at_least;
    sl_upstreams_clear_auth_holds(rt->upstreams, log_auth_hold_cleared);
    /* Changed limits and routes take effect now: whoever waits decides again. */
    sl_upstreams_wake_all(rt->upstreams);
    sl_msg_t m = sl_msg_make(SL_CODE_CONFIG_RELOADED, "path", source_name(rt), NULL);
    sl_log_info("%s [%s] (revision %llu%s)", m.text, sl_code_slug(m.code), (unsigned long long)rt->revision,
                was_safe ? ", safe mode over" : "");
    sl_msg_free(&m);
    emit(rt, sl_bus_config_reloaded(&ev, sl_wall_ms(), rt->revision, source));
    return 0;
}

/* Writes the running text back to the file (pushed changes); 0, or -1 with *err. */
static int
persist(sl_runtime_t *rt, sl_msg_t *err)
{
    if (rt->path == NULL)
        return 0;
    char reason[256];
    if (write_text(rt->path, rt->text, rt->text_len, reason, sizeof(reason)) != 0) {
        *err = sl_msg_make(SL_CODE_CONTROL_CONFIG_WRITE_FAILED, "path", rt->path, "reason", reason, NULL);
        sl_log_error("%s [%s]", err->text, sl_code_slug(err->code));
        return -1;
    }
    /* The watcher must not take sluice's own write for an edit. */
    remember_stat(rt);
    return 0;
}

/* ---- start ------------------------------------------------------------------------------------- */

static void
listen_copy(sl_listen_t *dst, const sl_listen_t *src)
{
    *dst = (sl_listen_t){
        .bind = sl_xstrdup(src->bind),
        .port = src->port,
        .tls_cert = src->tls_cert != NULL ? sl_xstrdup(src->tls_cert) : NULL,
        .tls_key = src->tls_key != NULL ? sl_xstrdup(src->tls_key) : NULL,
        .n_allow_from = src->n_allow_from,
        .key = src->key != NULL ? sl_xstrdup(src->key) : NULL,
        .metrics_open = src->metrics_open,
    };
    if (src->n_allow_from > 0) {
        dst->allow_from = sl_xcalloc(src->n_allow_from, sizeof(*dst->allow_from));
        memcpy(dst->allow_from, src->allow_from, src->n_allow_from * sizeof(*dst->allow_from));
    }
}

/*
 * Rows the writer could not write (behaviour.md §10: counted as dropped, and
 * an event says so): a warning and a RowsDropped event. On the writer thread;
 * the bus takes a flush from any thread.
 */
static void
report_rows_dropped(void *ctx, uint64_t rows, const char *reason)
{
    sl_gateway_t *gw = ctx;
    sl_log_warn("request DB: %llu row(s) could not be written (%s): counted as dropped",
                (unsigned long long)rows, reason);
    if (gw->bus == NULL || !sl_bus_is_active(gw->bus))
        return;
    sl_bus_batch_t batch = {0};
    sl_proto_event_t ev;
    sl_bus_emit(&batch, sl_bus_rows_dropped(&ev, sl_wall_ms(), rows));
    sl_bus_flush(gw->bus, &batch);
    sl_bus_batch_clear(&batch);
}

/* StoreChanged and a log line when the request DB turns degraded or ok; on the recorder's writer thread. */
static void
report_store_state(void *ctx, const sl_store_status_t *now)
{
    sl_gateway_t *gw = ctx;
    if (gw->bus == NULL || !sl_bus_is_active(gw->bus))
        return;
    sl_bus_batch_t batch = {0};
    sl_proto_event_t ev;
    sl_bus_emit(&batch, sl_bus_store_changed(&ev, sl_wall_ms(), now->degraded, now->kind == SL_STORE_POSTGRES,
                                             now->degraded ? now->reason : NULL, (int64_t)now->spooled_rows));
    sl_bus_flush(gw->bus, &batch);
    sl_bus_batch_clear(&batch);
}

/*
 * This instance's name, unique per instance: cluster.instance, else the
 * hostname and the gateway's port (its pid when the port is chosen at start).
 */
static void
instance_name(const sl_runtime_t *rt, const sl_config_t *config, char *out, size_t size)
{
    if (config->cluster.instance != NULL) {
        snprintf(out, size, "%s", config->cluster.instance);
        return;
    }
    char host[128] = "localhost";
    gethostname(host, sizeof(host) - 1);
    if (rt->gateway_listen.port != 0)
        snprintf(out, size, "%s:%u", host, rt->gateway_listen.port);
    else
        snprintf(out, size, "%s:pid%ld", host, (long)getpid());
}

/* rt->store from the config: SQLite's path, or PostgreSQL's URL with this instance's name and its spool. */
static void
set_store_where(sl_runtime_t *rt, const sl_config_t *config)
{
    char instance[192];
    instance_name(rt, config, instance, sizeof(instance));
    rt->store = (sl_store_where_t){
        .path = config->store_url == NULL ? sl_xstrdup(config->store_path) : NULL,
        .url = config->store_url != NULL ? sl_xstrdup(config->store_url) : NULL,
        .instance = sl_xstrdup(instance),
        .spool_path = sl_xstrdup(config->spool_path),
        .spool_max_bytes = config->spool_max_bytes,
    };
}

static void
clear_store_where(sl_store_where_t *w)
{
    free((char *)w->path);
    free((char *)w->url);
    free((char *)w->instance);
    free((char *)w->spool_path);
    *w = (sl_store_where_t){0};
}

/* The request DB's URL as logs show it: the password masked. */
static void
shown_url(const char *url, char *out, size_t size)
{
    snprintf(out, size, "%s", url);
    sl_scrub_secrets(out, strlen(out));
}

/* The request DB; without one sluice still serves, and counts every row as dropped. */
static sl_recorder_t *
open_recorder(sl_runtime_t *rt, const sl_config_t *config, sl_gateway_t *gw)
{
    sl_recorder_options_t opts = {
        .queue_capacity = SL_RECORDER_DEFAULT_QUEUE,
        .batch_max = config->store_url != NULL ? SL_RECORDER_PG_BATCH : SL_RECORDER_DEFAULT_BATCH,
        .busy_timeout_ms = SL_RECORDER_DEFAULT_BUSY_MS,
        .retention_days = config->retention_days,
        .on_dropped = report_rows_dropped,
        .on_dropped_ctx = gw,
        .on_state = report_store_state,
        .on_state_ctx = gw,
    };
    set_store_where(rt, config);
    char err[512];
    sl_recorder_t *rec = sl_recorder_open(&rt->store, &opts, err, sizeof(err));
    if (rec == NULL) {
        sl_log_error("request DB: %s; requests are served but not recorded", err);
        clear_store_where(&rt->store);
    } else if (rt->store.url != NULL) {
        char shown[512];
        shown_url(rt->store.url, shown, sizeof(shown));
        sl_log_info("request DB: PostgreSQL at %s, rows stored as instance %s (spool %s)", shown,
                    rt->store.instance, rt->store.spool_path);
    }
    return rec;
}

static void
log_problems(const sl_config_result_t *res)
{
    for (size_t i = 0; i < res->errors.len; i++)
        sl_log_error("%s [%s]", res->errors.items[i].text, sl_code_slug(res->errors.items[i].code));
    for (size_t i = 0; i < res->warnings.len; i++)
        sl_log_warn("%s [%s]", res->warnings.items[i].text, sl_code_slug(res->warnings.items[i].code));
}

static sl_config_result_t
load_start_text(sl_runtime_t *rt, const char *builtin)
{
    if (rt->path == NULL) {
        rt->text = builtin != NULL ? sl_xstrdup(builtin) : sl_config_default_yaml(sl_config_env_system());
        rt->text_len = strlen(rt->text);
        return sl_config_parse(rt->text, rt->text_len, NULL, sl_config_env_system());
    }
    rt->text = read_text(rt->path, &rt->text_len);
    if (rt->text == NULL) {
        rt->text = sl_xstrdup("");
        rt->text_len = 0;
        return sl_config_load_file(rt->path, sl_config_env_system());
    }
    remember_stat(rt);
    return sl_config_parse(rt->text, rt->text_len, rt->path, sl_config_env_system());
}

sl_runtime_t *
sl_runtime_start(const char *config_path, const char *builtin, sl_gateway_t *gw)
{
    sl_runtime_t *rt = sl_xcalloc(1, sizeof(*rt));
    pthread_mutex_init(&rt->lock, NULL);
    rt->path = config_path != NULL ? sl_xstrdup(config_path) : NULL;
    rt->gw = gw;
    rt->revision = 1;
    sl_config_result_t res = load_start_text(rt, builtin);
    log_problems(&res);
    rt->safe_mode = res.errors.len > 0;
    static const sl_listen_t gateway_fallback = {.bind = "127.0.0.1", .port = 8080};
    static const sl_listen_t control_fallback = {.bind = "127.0.0.1", .port = 8081};
    if (rt->safe_mode) {
        sl_log_error("%s has %zu problem(s): starting in safe mode (every request answers 503 gw.safe_mode)",
                     source_name(rt), res.errors.len);
        msgs_copy(&rt->problems, &res.errors);
    }
    bool gateway_ok = !rt->safe_mode || !sl_config_errors_under(&res.errors, "listen.gateway");
    bool control_ok = !rt->safe_mode || !sl_config_errors_under(&res.errors, "listen.control");
    listen_copy(&rt->gateway_listen, gateway_ok ? &res.config->gateway : &gateway_fallback);
    listen_copy(&rt->control_listen, control_ok ? &res.config->control : &control_fallback);
    sl_config_t *config = res.config;
    res.config = NULL;
    sl_config_result_free(&res);
    rt->max_body_at_start = config->max_body_bytes;
    rt->upstreams = sl_upstreams_new();
    sl_gateway_init(gw, open_recorder(rt, config, gw));
    rt->limiter = sl_limiter_new(&gw->retry_params, read_usage_history, announce_limits_changed, rt);
    publish(rt, config, rt->safe_mode, true);
    return rt;
}

sl_snapshot_holder_t *
sl_runtime_holder(sl_runtime_t *rt)
{
    return &rt->holder;
}

sl_upstreams_t *
sl_runtime_upstreams(sl_runtime_t *rt)
{
    return rt->upstreams;
}

bool
sl_runtime_safe_mode(sl_runtime_t *rt)
{
    pthread_mutex_lock(&rt->lock);
    bool safe = rt->safe_mode;
    pthread_mutex_unlock(&rt->lock);
    return safe;
}

const sl_listen_t *
sl_runtime_gateway_listen(const sl_runtime_t *rt)
{
    return &rt->gateway_listen;
}

const sl_listen_t *
sl_runtime_control_listen(const sl_runtime_t *rt)
{
    return &rt->control_listen;
}

void
sl_runtime_set_ports(sl_runtime_t *rt, int gateway_port, int control_port)
{
    if (gateway_port >= 0)
        rt->gateway_listen.port = (uint16_t)gateway_port;
    if (control_port >= 0)
        rt->control_listen.port = (uint16_t)control_port;
}

sl_proto_store_view_t *
sl_runtime_store_view(sl_runtime_t *rt)
{
    if (rt->gw->recorder == NULL)
        return NULL;
    sl_store_status_t st;
    sl_recorder_status(rt->gw->recorder, &st);
    sl_proto_store_view_t *v = sl_xcalloc(1, sizeof(*v));
    v->kind = st.kind == SL_STORE_POSTGRES ? SL_PROTO_STORE_KIND_POSTGRES : SL_PROTO_STORE_KIND_SQLITE;
    v->state = st.degraded ? SL_PROTO_STORE_STATE_DEGRADED : SL_PROTO_STORE_STATE_OK;
    if (st.kind == SL_STORE_POSTGRES) {
        v->has_spooled_rows = v->has_spool_bytes = true;
        v->spooled_rows = st.spooled_rows;
        v->spool_bytes = st.spool_bytes;
    }
    v->reason = st.degraded ? sl_xstrdup(st.reason) : NULL;
    return v;
}

const sl_store_where_t *
sl_runtime_store(const sl_runtime_t *rt)
{
    return rt->store.path != NULL || rt->store.url != NULL ? &rt->store : NULL;
}

/* ---- the control key ------------------------------------------------------------------------- */

/* `sluice.key` in the directory of the request DB's file; with PostgreSQL, of the config file. */
static char *
key_file_path(const sl_runtime_t *rt)
{
    sl_snapshot_t *s = sl_snapshot_acquire((sl_snapshot_holder_t *)&rt->holder);
    const char *db = s->config->store_url == NULL     ? s->config->store_path
                     : s->config->source_path != NULL ? s->config->source_path
                                                      : "";
    const char *slash = strrchr(db, '/');
    size_t dir_len = slash != NULL ? (size_t)(slash - db) + 1 : 0;
    char *path = sl_xmalloc(dir_len + sizeof("sluice.key"));
    memcpy(path, db, dir_len);
    memcpy(path + dir_len, "sluice.key", sizeof("sluice.key"));
    sl_snapshot_release(s);
    return path;
}

static char *
read_key_file(const char *path)
{
    size_t len;
    char *text = read_text(path, &len);
    if (text == NULL)
        return NULL;
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
        text[--len] = '\0';
    if (len == 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* A new random key, written with mode 0600 (never over an existing file). */
static char *
generate_key_file(const char *path)
{
    unsigned char raw[24];
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        return NULL;
    char *key = sl_xmalloc(2 * sizeof(raw) + 2);
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(key + 2 * i, 3, "%02x", raw[i]);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    size_t len = strlen(key);
    key[len] = '\n';
    bool ok = fd >= 0 && write(fd, key, len + 1) == (ssize_t)(len + 1);
    if (fd >= 0)
        close(fd);
    key[len] = '\0';
    if (!ok) {
        free(key);
        return NULL;
    }
    return key;
}

const char *
sl_runtime_control_key(sl_runtime_t *rt)
{
    pthread_mutex_lock(&rt->lock);
    if (rt->control_key == NULL && rt->control_listen.key != NULL)
        rt->control_key = sl_xstrdup(rt->control_listen.key);
    if (rt->control_key == NULL) {
        char *path = key_file_path(rt);
        rt->control_key = read_key_file(path);
        if (rt->control_key == NULL) {
            rt->control_key = generate_key_file(path);
            if (rt->control_key != NULL)
                sl_log_info("control key generated and stored in %s (mode 0600)", path);
            else
                sl_log_error("control key: %s could not be read or written (%s); the control endpoint is off",
                             path, strerror(errno));
        } else {
            sl_log_info("control key read from %s", path);
        }
        free(path);
    }
    pthread_mutex_unlock(&rt->lock);
    return rt->control_key;
}

/* ---- reloads --------------------------------------------------------------------------------- */

static void
reload_locked(sl_runtime_t *rt)
{
    size_t len;
    char *text = read_text(rt->path, &len);
    remember_stat(rt);
    if (text == NULL) {
        sl_msg_t m =
            sl_msg_make(SL_CODE_CONFIG_FILE_UNREADABLE, "path", rt->path, "reason", strerror(errno), NULL);
        sl_log_error("%s [%s]; keeping the running configuration", m.text, sl_code_slug(m.code));
        sl_msgs_t problems = {0};
        sl_msgs_push(&problems, m);
        sl_proto_event_t ev;
        emit(rt, sl_bus_config_rejected(&ev, sl_wall_ms(), SL_PROTO_CONFIG_SOURCE_FILE, &problems));
        sl_msgs_clear(&problems);
        return;
    }
    apply_text(rt, text, len, SL_PROTO_CONFIG_SOURCE_FILE, NULL, 0);
}

void
sl_runtime_reload(sl_runtime_t *rt)
{
    if (rt->path == NULL) {
        sl_log_info("SIGHUP: running on the embedded default, no file to reload");
        return;
    }
    pthread_mutex_lock(&rt->lock);
    reload_locked(rt);
    pthread_mutex_unlock(&rt->lock);
}

void
sl_runtime_check_file(sl_runtime_t *rt)
{
    if (rt->path == NULL)
        return;
    struct stat st;
    if (stat(rt->path, &st) != 0)
        return;
    pthread_mutex_lock(&rt->lock);
    bool changed = st.st_size != rt->file_size || st.st_mtim.tv_sec != rt->file_mtime.tv_sec ||
                   st.st_mtim.tv_nsec != rt->file_mtime.tv_nsec;
    if (changed) {
        size_t len;
        char *text = read_text(rt->path, &len);
        /* sluice's own write (or a touch): the content is what runs already. */
        bool same = text != NULL && len == rt->text_len && memcmp(text, rt->text, len) == 0 && !rt->safe_mode;
        free(text);
        if (same) {
            remember_stat(rt);
        } else {
            sl_log_info("%s changed: reloading", rt->path);
            reload_locked(rt);
        }
    }
    pthread_mutex_unlock(&rt->lock);
}

/* ---- control operations ------------------------------------------------------------------------ */

/* The unknown-key paths of the safe mode's problems, deleted; the result only if it then loads. */
static char *
repair_text(const sl_runtime_t *rt)
{
    const char *paths[64];
    size_t n = 0;
    for (size_t i = 0; i < rt->problems.len && n < 64; i++) {
        const sl_msg_t *m = &rt->problems.items[i];
        const char *path = sl_msg_arg(m, "path");
        if (path != NULL &&
            (m->code == SL_CODE_CONFIG_UNKNOWN_FIELD || m->code == SL_CODE_CONFIG_UNKNOWN_VALUE))
            paths[n++] = path;
    }
    if (n == 0 || n < rt->problems.len)
        return NULL;
    char err[256];
    char *fixed = sl_yamledit_delete_paths(rt->text, rt->text_len, paths, n, err, sizeof(err));
    if (fixed == NULL)
        return NULL;
    sl_config_result_t res = sl_config_parse(fixed, strlen(fixed), rt->path, sl_config_env_system());
    bool loads = res.errors.len == 0;
    sl_config_result_free(&res);
    if (!loads) {
        free(fixed);
        return NULL;
    }
    return fixed;
}

void
sl_runtime_get_config(sl_runtime_t *rt, sl_runtime_config_view_t *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&rt->lock);
    char err[256];
    out->yaml = sl_yamledit_redact_secrets(rt->text, rt->text_len, err, sizeof(err));
    if (out->yaml == NULL) {
        /* Text that does not parse as YAML holds no secret the redactor can find: show a notice instead. */
        size_t size = strlen(err) + 64;
        out->yaml = sl_xmalloc(size);
        snprintf(out->yaml, size, "# the file cannot be shown: %s\n", err);
    }
    out->revision = rt->revision;
    out->persisted = rt->path != NULL;
    if (rt->safe_mode) {
        msgs_copy(&out->problems, &rt->problems);
        out->repair_yaml = repair_text(rt);
        if (out->repair_yaml != NULL) {
            char *redacted =
                sl_yamledit_redact_secrets(out->repair_yaml, strlen(out->repair_yaml), err, sizeof(err));
            free(out->repair_yaml);
            out->repair_yaml = redacted;
        }
        /*
         * An invalid file may hold a secret where the redactor does not look
         * (a misspelt `api_key:`): whatever looks like a credential is masked too.
         */
        sl_scrub_secrets(out->yaml, strlen(out->yaml));
    }
    pthread_mutex_unlock(&rt->lock);
}

void
sl_runtime_config_view_free(sl_runtime_config_view_t *v)
{
    free(v->yaml);
    free(v->repair_yaml);
    sl_msgs_clear(&v->problems);
    memset(v, 0, sizeof(*v));
}

/*
 * In a cluster each instance restores the secrets of a pushed config from
 * its own file, so a secret that is new or changed here would not reach the
 * others: it must be an environment reference. Whether text's secrets are
 * all the current ones (or references).
 */
static bool
secrets_are_shared(const sl_runtime_t *rt, const char *text, char **redacted)
{
    char why[512];
    *redacted = sl_yamledit_redact_secrets(text, strlen(text), why, sizeof(why));
    if (*redacted == NULL)
        return false;
    char *back =
        sl_yamledit_restore_secrets(*redacted, strlen(*redacted), rt->text, rt->text_len, why, sizeof(why));
    bool same = back != NULL && strcmp(back, text) == 0;
    free(back);
    return same;
}

int
sl_runtime_put_config(sl_runtime_t *rt, const char *yaml, size_t len, uint64_t expect_revision, sl_msg_t *err,
                      sl_msgs_t *problems)
{
    pthread_mutex_lock(&rt->lock);
    int rc = -1;
    char *redacted = NULL;
    if (expect_revision != rt->revision) {
        char current[24], expected[24];
        snprintf(current, sizeof(current), "%llu", (unsigned long long)rt->revision);
        snprintf(expected, sizeof(expected), "%llu", (unsigned long long)expect_revision);
        *err = sl_msg_make(SL_CODE_CONTROL_CONFIG_CONFLICT, "current", current, "expected", expected, NULL);
        goto out;
    }
    char why[512];
    char *text = sl_yamledit_restore_secrets(yaml, len, rt->text, rt->text_len, why, sizeof(why));
    if (text == NULL) {
        sl_msgs_push(problems, sl_msg_make(SL_CODE_CONFIG_YAML_SYNTAX, "line", "?", "reason", why, NULL));
        *err = sl_msg_make(SL_CODE_CONTROL_CONFIG_REJECTED, "count", "1", NULL);
        goto out;
    }
    sl_cluster_t *cluster = rt->gw->cluster;
    if (cluster != NULL && !secrets_are_shared(rt, text, &redacted)) {
        free(text);
        *err = sl_msg_make(SL_CODE_CONTROL_CONFIG_SECRET_NOT_SHARED, NULL);
        goto out;
    }
    /* A cluster's revision is shared: this one comes after every config pushed anywhere. */
    if (apply_text(rt, text, strlen(text), SL_PROTO_CONFIG_SOURCE_CONTROL, problems,
                   cluster != NULL ? rt->pushed_revision + 1 : 0) != 0) {
        char count[24];
        snprintf(count, sizeof(count), "%zu", problems->len);
        *err = sl_msg_make(SL_CODE_CONTROL_CONFIG_REJECTED, "count", count, NULL);
        goto out;
    }
    rc = persist(rt, err);
    if (cluster != NULL) {
        rt->pushed_revision = rt->revision;
        snprintf(rt->pushed_origin, sizeof(rt->pushed_origin), "%s", sl_cluster_instance(cluster));
        sl_shared_config_replaced(rt->gw->shared, redacted, strlen(redacted), rt->revision);
    }
out:
    free(redacted);
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

/* Whether the running config has a provider (kind PROVIDER) or client named name. */
static bool
config_has(const sl_config_t *c, sl_bucket_kind_t kind, const char *name)
{
    if (kind == SL_BUCKET_CLIENT) {
        for (size_t i = 0; i < c->n_clients; i++)
            if (strcmp(c->clients[i].name, name) == 0)
                return true;
        return false;
    }
    for (size_t i = 0; i < c->n_providers; i++)
        if (strcmp(c->providers[i].name, name) == 0)
            return true;
    return false;
}

static bool
running_has(sl_runtime_t *rt, sl_bucket_kind_t kind, const char *name)
{
    sl_snapshot_t *s = sl_snapshot_acquire(&rt->holder);
    bool has = config_has(s->config, kind, name);
    sl_snapshot_release(s);
    return has;
}

static sl_msg_t
unknown_name(sl_bucket_kind_t kind, const char *name)
{
    return sl_msg_make(kind == SL_BUCKET_CLIENT ? SL_CODE_CONTROL_UNKNOWN_CLIENT
                                                : SL_CODE_CONTROL_UNKNOWN_PROVIDER,
                       "name", name, NULL);
}

/* Replaces the limits of (kind, name) in the running config and its file. */
static int
set_limits(sl_runtime_t *rt, sl_bucket_kind_t kind, const char *name, const sl_limit_t *limits, size_t n,
           sl_msg_t *err)
{
    pthread_mutex_lock(&rt->lock);
    int rc = -1;
    if (rt->safe_mode) {
        *err = sl_msg_make(SL_CODE_CONTROL_SAFE_MODE, NULL);
        goto out;
    }
    if (!running_has(rt, kind, name)) {
        *err = unknown_name(kind, name);
        goto out;
    }
    char why[512];
    char *text =
        sl_yamledit_set_limits(rt->text, rt->text_len, kind == SL_BUCKET_CLIENT ? "clients" : "providers",
                               name, limits, n, why, sizeof(why));
    if (text == NULL) {
        *err = sl_msg_make(SL_CODE_CONTROL_BAD_LIMIT, "index", "0", "reason", why, NULL);
        goto out;
    }
    sl_msgs_t problems = {0};
    if (apply_text(rt, text, strlen(text), SL_PROTO_CONFIG_SOURCE_CONTROL, &problems, 0) != 0) {
        /* The limits were checked by the caller, so the config loader names what else is wrong. */
        *err = problems.len > 0 ? msg_copy(&problems.items[0])
                                : sl_msg_make(SL_CODE_CONTROL_CONFIG_REJECTED, "count", "1", NULL);
        sl_msgs_clear(&problems);
        goto out;
    }
    rc = persist(rt, err);
out:
    pthread_mutex_unlock(&rt->lock);
    return rc;
}

int
sl_runtime_set_limits(sl_runtime_t *rt, sl_bucket_kind_t kind, const char *name, const sl_limit_t *limits,
                      size_t n, sl_msg_t *err)
{
    int rc = set_limits(rt, kind, name, limits, n, err);
    if (rc == 0)
        sl_shared_limits_replaced(rt->gw->shared, kind, name, limits, n);
    return rc;
}

/* ThrottleChanged after an operator's pause or resume. */
static void
announce_throttle(void *ctx, const sl_throttle_news_t *news)
{
    sl_runtime_t *rt = ctx;
    if (!news->changed)
        return;
    const char *name = news->up->name;
    const sl_throttle_t *t = &news->throttle;
    int64_t mono = sl_now_ms(), wall = sl_wall_ms();
    int64_t shown = sl_throttle_shown_until_ms(t);
    sl_snapshot_t *s = sl_snapshot_acquire(&rt->holder);
    sl_bus_throttle_facts_t f = {
        .t = t,
        .t_until_ms = shown < 0 || shown == SL_THROTTLE_NEVER ? -1 : wall + (shown - mono),
        .limits = SL_LIMIT_OK,
        .tz = s->config->tz,
    };
    sl_proto_event_t ev;
    pthread_mutex_lock(&rt->lock);
    emit(rt, sl_bus_throttle_changed(&ev, wall, name, sl_bus_throttle_view(name, &f)));
    pthread_mutex_unlock(&rt->lock);
    sl_snapshot_release(s);
}

/* Control commands run one at a time: a pause or resume still unanswered is only announced by the next. */
static sl_shared_call_t *
operator_call(sl_runtime_t *rt)
{
    sl_shared_cancel(rt->gw->shared, &rt->operator_call);
    return &rt->operator_call;
}

int
sl_runtime_pause(sl_runtime_t *rt, const char *name, int64_t until_wall_ms, sl_msg_t *err)
{
    if (!running_has(rt, SL_BUCKET_PROVIDER, name)) {
        *err = unknown_name(SL_BUCKET_PROVIDER, name);
        return -1;
    }
    int64_t mono = sl_now_ms(), wall = sl_wall_ms();
    int64_t until = until_wall_ms == 0 ? SL_THROTTLE_NEVER : mono + (until_wall_ms - wall);
    sl_upstream_t *up = sl_upstreams_find(rt->upstreams, name);
    sl_log_info("upstream %s: paused by an operator %s", name, until_wall_ms == 0 ? "until resumed" : "");
    if (up != NULL)
        sl_shared_pause_upstream(rt->gw->shared, up, until, mono, operator_call(rt), announce_throttle, rt);
    return 0;
}

int
sl_runtime_resume(sl_runtime_t *rt, const char *name, sl_msg_t *err)
{
    if (!running_has(rt, SL_BUCKET_PROVIDER, name)) {
        *err = unknown_name(SL_BUCKET_PROVIDER, name);
        return -1;
    }
    sl_upstream_t *up = sl_upstreams_find(rt->upstreams, name);
    sl_log_info("upstream %s: resumed by an operator", name);
    if (up != NULL)
        sl_shared_resume_upstream(rt->gw->shared, up, sl_now_ms(), operator_call(rt), announce_throttle, rt);
    return 0;
}

/* ---- cluster mode ------------------------------------------------------------------------------ */

static sl_upstream_t *
cluster_find(void *ctx, const char *name)
{
    sl_runtime_t *rt = ctx;
    return sl_upstreams_find(rt->upstreams, name);
}

static void
cluster_each(void *ctx, void (*each)(void *each_ctx, sl_upstream_t *up), void *each_ctx)
{
    sl_runtime_t *rt = ctx;
    sl_snapshot_t *s = sl_snapshot_acquire(&rt->holder);
    for (size_t i = 0; i < s->config->n_providers; i++)
        each(each_ctx, s->upstreams[i]);
    sl_snapshot_release(s);
}

static void
cluster_each_set(void *ctx, void (*each)(void *each_ctx, sl_limit_set_t *set), void *each_ctx)
{
    sl_runtime_t *rt = ctx;
    sl_snapshot_t *s = sl_snapshot_acquire(&rt->holder);
    for (size_t i = 0; s->limits.providers != NULL && i < s->config->n_providers; i++)
        each(each_ctx, s->limits.providers[i]);
    for (size_t i = 0; s->limits.clients != NULL && i < s->config->n_clients; i++)
        each(each_ctx, s->limits.clients[i]);
    sl_snapshot_release(s);
}

/* HealthChanged after another instance's breaker verdict. */
static void
cluster_announce_health(void *ctx, sl_upstream_t *up, const sl_breaker_t *b)
{
    sl_runtime_t *rt = ctx;
    sl_log_info("upstream %s: breaker %s (%s), as another instance found", up->name,
                sl_breaker_state_slug(b->state), sl_breaker_reason_slug(b));
    sl_snapshot_t *s = sl_snapshot_acquire(&rt->holder);
    sl_proto_event_t ev;
    pthread_mutex_lock(&rt->lock);
    emit(rt, sl_bus_breaker_health(&ev, up->name, b, s->config->tz, sl_now_ms(), sl_wall_ms()));
    pthread_mutex_unlock(&rt->lock);
    sl_snapshot_release(s);
}

/* ClusterChanged and get_instances say an instance's part the same way. */
static const sl_proto_cluster_state_t proto_parts[] = {
    [SL_CLUSTER_PART_JOINED] = SL_PROTO_CLUSTER_STATE_JOINED,
    [SL_CLUSTER_PART_DEGRADED] = SL_PROTO_CLUSTER_STATE_DEGRADED,
    [SL_CLUSTER_PART_ALONE] = SL_PROTO_CLUSTER_STATE_ALONE};

/* ClusterChanged: this instance joined, lost Redis, or saw the count of live instances change. */
static void
cluster_announce(void *ctx, sl_cluster_part_t part, const char *reason, uint32_t instances)
{
    sl_runtime_t *rt = ctx;
    sl_msg_t why = {0};
    if (reason != NULL)
        why = sl_msg_make(SL_CODE_GW_CLUSTER_DEGRADED, "cluster", sl_cluster_name(rt->gw->cluster), "reason",
                          reason, NULL);
    sl_proto_event_t ev;
    pthread_mutex_lock(&rt->lock);
    emit(rt, sl_bus_cluster_changed(&ev, sl_wall_ms(), proto_parts[part], instances,
                                    reason != NULL ? &why : NULL));
    pthread_mutex_unlock(&rt->lock);
    if (reason != NULL)
        sl_msg_free(&why);
}

/* This instance's counts per upstream, and their sum. */
static size_t
own_counts(sl_runtime_t *rt, sl_snapshot_t *s, sl_cluster_count_t *counts, size_t cap, uint32_t *in_flight,
           uint32_t *queued)
{
    size_t n = s->config->n_providers < cap ? s->config->n_providers : cap;
    *in_flight = *queued = 0;
    for (size_t i = 0; i < n; i++) {
        sl_upstream_view_t v = sl_shared_upstream_view(
            rt->gw->shared, s->upstreams[i], s->limits.providers != NULL ? s->limits.providers[i] : NULL);
        counts[i] = (sl_cluster_count_t){s->config->providers[i].name, v.in_flight, v.queued};
        *in_flight += v.in_flight;
        *queued += v.queued;
    }
    return n;
}

#define SL_CLUSTER_COUNTS_MAX 256

/* What this instance's heartbeat tells the others. */
static void
cluster_describe(void *ctx, char *out, size_t size)
{
    sl_runtime_t *rt = ctx;
    sl_snapshot_t *s = sl_snapshot_acquire(&rt->holder);
    sl_cluster_count_t counts[SL_CLUSTER_COUNTS_MAX];
    uint32_t in_flight, queued;
    size_t n = own_counts(rt, s, counts, SL_CLUSTER_COUNTS_MAX, &in_flight, &queued);
    sl_cluster_describe(counts, n, sl_wall_ms(), out, size);
    sl_snapshot_release(s);
}

bool
sl_runtime_cluster_view(sl_runtime_t *rt, sl_proto_cluster_view_t **cluster,
                        sl_proto_instance_view_t **instances, size_t *n_instances)
{
    sl_cluster_t *c = rt->gw->cluster;
    if (c == NULL)
        return false;
    sl_snapshot_t *s = sl_snapshot_acquire(&rt->holder);
    sl_cluster_count_t counts[SL_CLUSTER_COUNTS_MAX];
    uint32_t in_flight, queued;
    own_counts(rt, s, counts, SL_CLUSTER_COUNTS_MAX, &in_flight, &queued);
    sl_snapshot_release(s);
    sl_cluster_member_t *roster;
    size_t n = sl_cluster_roster(c, &roster);
    *n_instances = sl_cluster_instance_views(roster, n, sl_cluster_instance(c), in_flight, queued,
                                             sl_wall_ms(), instances);
    sl_cluster_roster_free(roster, n);
    *cluster = sl_xcalloc(1, sizeof(**cluster));
    **cluster = (sl_proto_cluster_view_t){
        .name = sl_xstrdup(sl_cluster_name(c)),
        .instance = sl_xstrdup(sl_cluster_instance(c)),
        .state = proto_parts[sl_cluster_part(c)],
        .instances = sl_cluster_instances(c),
    };
    return true;
}

/* Another instance's operator pushed limits: this instance applies them and writes its own file. */
static void
cluster_apply_limits(void *ctx, sl_bucket_kind_t kind, const char *name, const sl_limit_t *limits, size_t n)
{
    sl_runtime_t *rt = ctx;
    sl_msg_t err = {0};
    if (set_limits(rt, kind, name, limits, n, &err) == 0) {
        sl_log_info("cluster: the limits of %s %s pushed on another instance apply here too",
                    kind == SL_BUCKET_CLIENT ? "client key" : "upstream", name);
    } else {
        sl_log_warn("cluster: the limits of %s pushed on another instance do not apply here: %s [%s]", name,
                    err.text, sl_code_slug(err.code));
        sl_msg_free(&err);
    }
}

/* What an instance keeps as its own of a config pushed on another (cluster.md). */
static const char *const own_entries[] = {"listen", "store", "cluster.instance"};

/*
 * Another instance's operator pushed a config: this instance applies it
 * with its own secrets and its own listen, store and cluster.instance, at
 * the pushed revision, and writes its own file.
 */
static void
cluster_adopt_config(void *ctx, const char *origin, size_t origin_len, uint64_t revision, const char *text,
                     size_t len, bool apply)
{
    sl_runtime_t *rt = ctx;
    pthread_mutex_lock(&rt->lock);
    if (!sl_cluster_config_is_newer(revision, origin, origin_len, rt->pushed_revision, rt->pushed_origin))
        goto out;
    rt->pushed_revision = revision;
    snprintf(rt->pushed_origin, sizeof(rt->pushed_origin), "%.*s", (int)origin_len, origin);
    if (!apply) {
        sl_log_info("cluster: the config pushed on %.*s (revision %llu) is in Redis; this instance runs its "
                    "own file until the next push",
                    (int)origin_len, origin, (unsigned long long)revision);
        goto out;
    }
    char why[512];
    char *restored = sl_yamledit_restore_secrets(text, len, rt->text, rt->text_len, why, sizeof(why));
    char *kept = restored == NULL ? NULL
                                  : sl_yamledit_keep_entries(restored, strlen(restored), rt->text,
                                                             rt->text_len, own_entries, 3, why, sizeof(why));
    free(restored);
    if (kept == NULL) {
        sl_log_warn("cluster: the config pushed on %.*s (revision %llu) does not apply here: %s",
                    (int)origin_len, origin, (unsigned long long)revision, why);
        goto out;
    }
    sl_msgs_t problems = {0};
    if (apply_text(rt, kept, strlen(kept), SL_PROTO_CONFIG_SOURCE_CONTROL, &problems, revision) == 0) {
        sl_msg_t err = {0};
        if (persist(rt, &err) != 0) {
            sl_log_warn("%s [%s]", err.text, sl_code_slug(err.code));
            sl_msg_free(&err);
        }
        sl_log_info("cluster: the config pushed on %.*s applies here too (revision %llu)", (int)origin_len,
                    origin, (unsigned long long)rt->revision);
    } else {
        sl_log_warn("cluster: the config pushed on %.*s (revision %llu) does not apply here: %zu problem(s)",
                    (int)origin_len, origin, (unsigned long long)revision, problems.len);
    }
    sl_msgs_clear(&problems);
out:
    pthread_mutex_unlock(&rt->lock);
}

void
sl_runtime_join_cluster(sl_runtime_t *rt)
{
    sl_snapshot_t *s = sl_snapshot_acquire(&rt->holder);
    const sl_cluster_config_t *cc = &s->config->cluster;
    if (rt->safe_mode || !cc->enabled) {
        sl_snapshot_release(s);
        return;
    }
    char instance[192];
    instance_name(rt, s->config, instance, sizeof(instance));
    sl_gateway_t *gw = rt->gw;
    sl_shared_cluster_hooks_t hooks = {.find = cluster_find,
                                       .each = cluster_each,
                                       .each_set = cluster_each_set,
                                       .announce = announce_throttle,
                                       .announce_health = cluster_announce_health,
                                       .apply_limits = cluster_apply_limits,
                                       .adopt_config = cluster_adopt_config,
                                       .announce_cluster = cluster_announce,
                                       .describe = cluster_describe,
                                       .ctx = rt};
    sl_shared_state_t *shared =
        sl_shared_cluster_new(sl_shared_local_new(&gw->stopping, false), cc, instance, &hooks, &gw->cluster);
    if (shared == NULL) {
        sl_log_error("cluster %s: cannot start its connection thread: this instance runs alone", cc->name);
    } else {
        sl_shared_state_free(gw->shared);
        gw->shared = shared;
        if (cc->redis_unix_path != NULL)
            sl_log_info("cluster %s: instance %s, Redis at unix:%s", cc->name, instance, cc->redis_unix_path);
        else
            sl_log_info("cluster %s: instance %s, Redis at %s:%u", cc->name, instance, cc->redis_host,
                        cc->redis_port);
    }
    sl_snapshot_release(s);
}

/* ---- provider views ---------------------------------------------------------------------------- */

#define VIEW_MAX_LIMITS 32

static void
provider_view(sl_proto_provider_view_t *out, sl_shared_state_t *shared, const sl_provider_t *p,
              sl_upstream_t *up, sl_limit_set_t *set, const sl_tz_t *tz, int64_t mono, int64_t wall)
{
    sl_limit_view_t limits[VIEW_MAX_LIMITS];
    size_t n_limits = set != NULL ? sl_limit_set_views(set, wall, limits, VIEW_MAX_LIMITS) : 0;
    sl_bus_provider_facts_t f = {
        .provider = p,
        .limits = limits,
        .n_limits = n_limits < VIEW_MAX_LIMITS ? n_limits : VIEW_MAX_LIMITS,
    };
    sl_upstream_view_t v = sl_shared_upstream_view(shared, up, set);
    f.queued = v.queued;
    f.in_flight = v.in_flight;
    int64_t t_until = sl_throttle_shown_until_ms(&v.throttle);
    f.throttle = (sl_bus_throttle_facts_t){
        .t = &v.throttle,
        .t_until_ms = t_until < 0 || t_until == SL_THROTTLE_NEVER ? -1 : wall + (t_until - mono),
        .limits = v.shown,
        .limit = &v.shown_limit,
        .limits_until_ms = v.shown_until_ms,
        .tz = tz,
    };
    pthread_mutex_lock(&up->lock);
    f.health = up->breaker.state;
    pthread_mutex_unlock(&up->lock);
    sl_bus_provider_view(out, &f);
}

size_t
sl_runtime_provider_views(sl_runtime_t *rt, sl_proto_provider_view_t **out)
{
    sl_snapshot_t *s = sl_snapshot_acquire(&rt->holder);
    size_t n = s->config->n_providers;
    *out = n > 0 ? sl_xcalloc(n, sizeof(**out)) : NULL;
    int64_t mono = sl_now_ms(), wall = sl_wall_ms();
    for (size_t i = 0; i < n; i++)
        provider_view(&(*out)[i], rt->gw->shared, &s->config->providers[i], s->upstreams[i],
                      s->limits.providers != NULL ? s->limits.providers[i] : NULL, s->config->tz, mono, wall);
    sl_snapshot_release(s);
    sl_cluster_t *c = rt->gw->cluster;
    if (c == NULL || n == 0)
        return n;
    /* The cluster's totals: this instance's of now, the others' of their last heartbeat. */
    sl_cluster_count_t *others = sl_xcalloc(n, sizeof(*others));
    for (size_t i = 0; i < n; i++)
        others[i].name = (*out)[i].name;
    sl_cluster_member_t *roster;
    size_t n_roster = sl_cluster_roster(c, &roster);
    sl_cluster_others_counts(roster, n_roster, sl_cluster_instance(c), others, n);
    sl_cluster_roster_free(roster, n_roster);
    for (size_t i = 0; i < n; i++) {
        sl_proto_provider_view_t *v = &(*out)[i];
        v->has_cluster_in_flight = v->has_cluster_queued = true;
        v->cluster_in_flight = v->in_flight + others[i].in_flight;
        v->cluster_queued = v->queued + others[i].queued;
    }
    free(others);
    return n;
}

void
sl_runtime_provider_views_free(sl_proto_provider_view_t *views, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sl_proto_provider_view_free(&views[i]);
    free(views);
}

/* ---- /metrics ------------------------------------------------------------------------------------- */

static const char *
limit_measure_slug(const sl_proto_limit_view_t *l)
{
    return l->has_requests ? "requests" : l->has_tokens ? "tokens" : "cost";
}

static double
limit_used_ratio(const sl_proto_limit_view_t *l)
{
    uint64_t amount = l->has_requests ? l->requests : l->has_tokens ? l->tokens : l->cost_micros;
    return amount > 0 ? (double)l->used / (double)amount : 0;
}

void
sl_runtime_metrics(sl_runtime_t *rt, uint32_t control_subscribers, uint64_t events_dropped, sl_strbuf_t *out)
{
    sl_proto_provider_view_t *views = NULL;
    size_t n = sl_runtime_provider_views(rt, &views);
    sl_metrics_upstream_t *ups = sl_xcalloc(n + 1, sizeof(*ups));
    size_t n_limits = 0;
    for (size_t i = 0; i < n; i++)
        n_limits += views[i].limits_len;
    sl_metrics_limit_t *limits = sl_xcalloc(n_limits + 1, sizeof(*limits));
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const sl_proto_provider_view_t *v = &views[i];
        sl_proto_throttle_kind_t kind =
            v->throttle != NULL ? v->throttle->kind : SL_PROTO_THROTTLE_KIND_COUNT;
        ups[i] = (sl_metrics_upstream_t){
            .name = v->name,
            .health = v->health == SL_PROTO_HEALTH_STATE_OK          ? 0
                      : v->health == SL_PROTO_HEALTH_STATE_HALF_OPEN ? 1
                                                                     : 2,
            .paused = kind == SL_PROTO_THROTTLE_KIND_PAUSED,
            .manual = kind == SL_PROTO_THROTTLE_KIND_MANUAL,
            .queued = v->queued,
            .queued_gate = sl_bus_throttle_is_pause(v->throttle)        ? SL_GATE_THROTTLED
                           : kind == SL_PROTO_THROTTLE_KIND_WINDOW_FULL ? SL_GATE_WINDOW_FULL
                                                                        : SL_GATE_SLOTS,
            .in_flight = v->in_flight,
        };
        for (size_t j = 0; j < v->limits_len; j++) {
            const sl_proto_limit_view_t *l = &v->limits[j];
            limits[k++] = (sl_metrics_limit_t){
                .target_kind = "provider",
                .target = v->name,
                .per = sl_proto_period_slug(l->per),
                .measure = limit_measure_slug(l),
                .every = l->every,
                .used_ratio = limit_used_ratio(l),
            };
        }
    }
    sl_recorder_stats_t stats = {0};
    sl_store_status_t store = {0};
    if (rt->gw->recorder != NULL) {
        sl_recorder_stats(rt->gw->recorder, &stats);
        sl_recorder_status(rt->gw->recorder, &store);
    }
    sl_tracer_stats_t spans;
    sl_tracer_stats(rt->gw->tracer, &spans);
    sl_metrics_scrape_t s = {
        .upstreams = ups,
        .n_upstreams = n,
        .limits = limits,
        .n_limits = k,
        .control_subscribers = control_subscribers,
        .events_dropped = events_dropped,
        .db_rows_dropped = stats.dropped + atomic_load(&rt->gw->rows_dropped),
        .db_spool = rt->gw->recorder != NULL && store.kind == SL_STORE_POSTGRES,
        .db_rows_spooled = store.spooled_rows,
        .db_spool_bytes = store.spool_bytes,
        .spans_exported = spans.exported,
        .spans_dropped = spans.dropped,
        .cluster = rt->gw->cluster != NULL,
        .cluster_state = rt->gw->cluster == NULL                                    ? 0
                         : sl_cluster_state(rt->gw->cluster) == SL_CLUSTER_JOINED   ? 1
                         : sl_cluster_state(rt->gw->cluster) == SL_CLUSTER_DEGRADED ? 2
                                                                                    : 0,
    };
    sl_metrics_render(rt->gw->metrics, &s, out);
    free(limits);
    free(ups);
    sl_runtime_provider_views_free(views, n);
}

void
sl_runtime_stats_counts(sl_runtime_t *rt, sl_metrics_counts_t *out)
{
    sl_metrics_counts(rt->gw->metrics, out);
}
