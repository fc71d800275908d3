/*
 * The web control app's static files, embedded at build time
 * (control/embed_assets.py over ui-export's bundle): sluice needs no node
 * and no files on disk to serve it.
 */
#ifndef SL_CONTROL_ASSETS_H
#define SL_CONTROL_ASSETS_H

#include <stddef.h>

typedef struct {
    const char *path; /* "/", "/index.html", "/app.js", … */
    const char *content_type;
    const unsigned char *data;
    size_t len;
} sl_asset_t;

extern const sl_asset_t sl_assets[];
extern const size_t sl_assets_count;

#endif
