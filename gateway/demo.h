/*
 * Demo mode's simulated upstream (`sluice --demo [MODE]`, config.md): one
 * small HTTP/1.1 server on 127.0.0.1 (an ephemeral port), in its own thread,
 * that answers every dialect of formats.md the way core/demo_script.h
 * plans it — plausible streamed answers, and trouble that cycles on its own
 * (overload bursts, 429 storms, dropped streams, slow first tokens) or one
 * pinned mode. Each dialect has two upstreams, /a and /b; sl_demo_config_yaml
 * writes the config that routes sluice's providers to them.
 *
 * The server speaks keep-alive HTTP/1.1 with Content-Length request bodies
 * and chunked streamed answers; anything else gets a 400 and a close. It
 * checks the upstream key (SL_DEMO_UPSTREAM_KEY, in each dialect's own
 * header) so a wrong config shows as a 401, as a real provider's would.
 */
#ifndef SL_DEMO_H
#define SL_DEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The key sluice sends to the demo upstreams. */
#define SL_DEMO_UPSTREAM_KEY "demo-upstream-key"
/* The gateway key of the demo config's one client: obviously fake, safe to print. */
#define SL_DEMO_CLIENT_KEY "sk-demo-0000000000000000"

typedef struct sl_demo sl_demo_t;

/*
 * Starts the demo upstream: binds 127.0.0.1 on an ephemeral port and starts
 * its thread. pin is a mode name (sl_demo_trouble_parse: calm, overload,
 * rate-limit, drop, slow) to keep for good, or NULL, "" or "cycle" to cycle
 * through them. Logs the first phase, then each change ("demo: 429 storm on
 * the 'a' upstreams for 20 s"). Returns the server, or NULL with a message
 * in err (an unknown mode, a socket or thread failure); err may be NULL.
 */
sl_demo_t *sl_demo_start(const char *pin, char *err, size_t err_size);

/* The port the demo upstream listens on (127.0.0.1). */
uint16_t sl_demo_port(const sl_demo_t *d);

/*
 * What the demo upstream does right now, for a log line or a banner:
 * sl_demo_trouble_describe of the current phase. Static, never NULL. Any
 * thread.
 */
const char *sl_demo_trouble_now(const sl_demo_t *d);

/*
 * Pins a mode from now on (a name as sl_demo_start takes it), or goes back
 * to cycling with NULL, "" or "cycle". Returns false, changing nothing, for
 * an unknown name. Any thread; the change is logged by the server thread.
 */
bool sl_demo_pin(sl_demo_t *d, const char *mode);

/* Stops the thread, closes every connection and frees d. NULL is fine. */
void sl_demo_stop(sl_demo_t *d);

/*
 * The YAML sluice runs on in demo mode, with every provider on the demo
 * upstream at 127.0.0.1:upstream_port: gateway 127.0.0.1:8080, control
 * 127.0.0.1:8081 (no key: sluice generates one), the client "demo" with
 * SL_DEMO_CLIENT_KEY, two providers per dialect (demo-<protocol>-a / -b),
 * failover routes per model glob (claude-*, gpt-5* to Responses, other gpt-*
 * to Chat, gemini-*, anthropic.* and us.anthropic.* to Bedrock), a usage
 * limit on demo-openai-chat-a and max_concurrent on demo-anthropic-b so the
 * usage bars and busy queues have something to show, wait_secs 60, and
 * short breaker pauses (10 s, at most 30 s) so that the 'a' upstreams come
 * back between the phases of trouble.
 * The caller frees the result.
 */
char *sl_demo_config_yaml(uint16_t upstream_port);

#endif
