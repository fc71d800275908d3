/*
 * Minimal edits to the user's YAML config (config.md): config pushed over the
 * control protocol is written back with only the edited lines changed
 * (comments, order, quoting and everything else kept byte for byte), the
 * file is shown with its literal secrets replaced by "***" and a pushed
 * "***" means "keep the current secret", a config pushed by another
 * instance keeps this instance's own entries, and safe mode's repair deletes
 * unknown keys. Text in, text out: libyaml's parser gives the byte span of
 * every node and the original text is spliced.
 *
 * Only the first document of the stream is read or edited (as the loader
 * does); anything after it is kept as it is. An anchor or alias where an
 * edit would land is refused rather than guessed about.
 *
 * Every function returns a new NUL-terminated string (caller frees) or, on
 * failure, NULL with a one-line reason in err[0..err_size); the input is
 * never changed.
 */
#ifndef SL_YAMLEDIT_H
#define SL_YAMLEDIT_H

#include <stddef.h>

#include "core/types.h"

/* What sl_yamledit_redact_secrets writes instead of a literal secret. */
#define SL_YAMLEDIT_SECRET_SENTINEL "***"

/*
 * Sets the limits of the item of section ("providers" or "clients") whose
 * name is name: an existing `limits` value is replaced (a flow sequence by a
 * flow sequence, a block sequence by one `- {per: …}` line per limit at its
 * indentation, anything else by a flow sequence after the colon; comments
 * inside the old value go with it); an item without one gets a `limits:`
 * entry after its last entry (block) or `, limits: […]` before its closing
 * brace (flow). With n == 0 the `limits` entry is removed. `every` is
 * written only when above 1 (0 counts as 1); cost is written in USD, exactly
 * (500000 micro-dollars is `cost: 0.5`). Fails when the text does not parse,
 * the section or the item is absent, the item lies under an anchor, the
 * limits hold an anchor or alias, or a limit has an unknown per/measure or
 * an amount below 1.
 */
char *sl_yamledit_set_limits(const char *yaml, size_t len, const char *section, const char *name,
                             const sl_limit_t *limits, size_t n, char *err, size_t err_size);

/*
 * The text with every literal secret replaced by "***" (quoted): the keys of
 * clients and providers, providers' aws.secret_access_key and
 * aws.session_token, header values, listen.control.key; and, in the URLs of
 * cluster.redis and store.url, only the password (sl_url_password), the URL
 * double-quoted: `"redis://:***@127.0.0.1:6379/0"`. A value (a URL's
 * password) holding a ${VAR} reference is not a literal and is kept, and so
 * is an empty one. Fails when the text does not parse or an anchor or alias
 * stands at a secret position.
 */
char *sl_yamledit_redact_secrets(const char *yaml, size_t len, char *err, size_t err_size);

/*
 * new_yaml with every secret position whose value is exactly "***" given the
 * value written at the same position of current_yaml, as it is written there
 * (quotes included; a value spread over several lines, or a plain one
 * moving into a flow collection, is re-quoted on one line). A URL position
 * whose password is exactly "***" gets the current URL's password: the
 * current value as written when the rest of the URL is unchanged, else the
 * new URL with that password, double-quoted. Positions are logical: list
 * items are matched by name, headers by name (any case), listen.control.key
 * and the URLs by their paths; of duplicate entries, the nth gets the nth.
 * Fails, naming the path, when current_yaml has no value (or an empty one;
 * at a URL position, no password) at such a position, when an anchor or
 * alias stands at either end, and when either text does not parse.
 */
char *sl_yamledit_restore_secrets(const char *new_yaml, size_t new_len, const char *current_yaml,
                                  size_t current_len, char *err, size_t err_size);

/*
 * The text without the mapping entries at paths, in the form the loader's
 * messages give them (`providers[1].limts`, `failover.wiat_secs`; a key
 * holding '.' or '[' is matched whole, the longest key first). A block entry
 * goes with its whole lines (its trailing comment included), a flow entry
 * with its comma; a block mapping left empty becomes `{}`. Fails when the
 * text does not parse, a path names no mapping entry, passes through an
 * alias, or the entry holds or lies under an anchor.
 */
char *sl_yamledit_delete_paths(const char *yaml, size_t len, const char *const *paths, size_t n, char *err,
                               size_t err_size);

/*
 * new_yaml with the entries at paths as current_yaml has them: the parts of
 * its config an instance keeps as its own when another instance's config is
 * pushed to it (cluster.md: put_config applies everything but listen,
 * cluster.instance and store.*). Paths are mapping keys joined by '.'
 * ("listen", "store", "cluster.instance"; a key holding '.' cannot be
 * named); a repeated path counts once, and a path under a top-level path
 * also given is covered by it. For each path:
 *  - in both texts: new's entry takes current's value as written there. A
 *    top-level entry (of a block-style top-level mapping) is replaced whole:
 *    from its key's line through its value's last line (trailing comment
 *    included) by current's lines of that entry, so a block value may stand
 *    where a flow one stood and the reverse. A nested entry's value must be
 *    a scalar on one line in both (quotes kept as written in current, but a
 *    plain one holding a comma or bracket is double-quoted when it moves
 *    into a flow mapping).
 *  - only in current: a top-level entry is appended as current's lines at
 *    the end of new's top-level mapping (a newline added first if new does
 *    not end in one); a nested scalar entry is added to its parent mapping in
 *    new, which must exist (block parent: a `key: value` line at the
 *    siblings' indentation after the last entry; flow parent: `, key: value`
 *    before the closing brace; an empty flow parent `{}` becomes
 *    `{key: value}`).
 *  - only in new: the entry is deleted (as sl_yamledit_delete_paths does).
 *  - in neither: nothing.
 * Everything else in new_yaml is kept byte for byte. A new_yaml with no
 * document at all (empty, or only comments) counts as an empty top-level
 * mapping; any other top level that is not a block mapping is refused.
 * Fails, naming the text ("new: …", "current: …") or the path ("listen: …"),
 * when either text does not parse, a top level is not a mapping or is flow
 * style, a path passes through an alias, an anchor or alias stands at or
 * under an entry to edit (or, in new, an anchor above it), a nested value is
 * not a one-line scalar, a nested entry's parent is absent in new (or is not
 * a mapping), or the two texts indent their top-level keys differently.
 */
char *sl_yamledit_keep_entries(const char *new_yaml, size_t new_len, const char *current_yaml,
                               size_t current_len, const char *const *paths, size_t n, char *err,
                               size_t err_size);

#endif
