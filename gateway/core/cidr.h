/* IP literals and address ranges, for listen.*.bind and allow_from. */
#ifndef SL_CIDR_H
#define SL_CIDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct {
    int family; /* AF_INET or AF_INET6 */
    uint8_t addr[16];
    uint8_t prefix_bits;
} sl_cidr_t;

/* Parses an IPv4 or IPv6 literal into addr (4 or 16 bytes used); false when it is not one. */
bool sl_ip_parse(const char *s, int *family, uint8_t addr[16]);
/* The socket address of an IP literal and a port, for connect or bind; 0 when s is not an IP literal. */
socklen_t sl_ip_sockaddr(const char *s, uint16_t port, struct sockaddr_storage *out);
/* Whether an IP literal is a loopback address (127.0.0.0/8 or ::1). */
bool sl_ip_is_loopback(const char *s);
/* Parses "10.0.0.0/8", "::1/128" or a bare address (a single host); false on anything else. */
bool sl_cidr_parse(const char *s, sl_cidr_t *out);
/*
 * Whether a peer address is inside any of the ranges. An IPv4-mapped IPv6
 * peer (::ffff:a.b.c.d) matches IPv4 ranges. An empty list allows everyone.
 */
bool sl_cidr_allows(const sl_cidr_t *ranges, size_t n, const struct sockaddr *peer);
/* Whether a peer address is a loopback one (127.0.0.0/8, ::1, or ::ffff:127.x.y.z); false for other families.
 */
bool sl_sockaddr_is_loopback(const struct sockaddr *peer);

#endif
