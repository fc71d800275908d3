#include "cidr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

bool
sl_ip_parse(const char *s, int *family, uint8_t addr[16])
{
    memset(addr, 0, 16);
    if (inet_pton(AF_INET, s, addr) == 1) {
        *family = AF_INET;
        return true;
    }
    if (inet_pton(AF_INET6, s, addr) == 1) {
        *family = AF_INET6;
        return true;
    }
    return false;
}

socklen_t
sl_ip_sockaddr(const char *s, uint16_t port, struct sockaddr_storage *out)
{
    int family;
    uint8_t addr[16];
    memset(out, 0, sizeof(*out));
    if (!sl_ip_parse(s, &family, addr))
        return 0;
    if (family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)out;
        sin->sin_family = AF_INET;
        sin->sin_port = htons(port);
        memcpy(&sin->sin_addr, addr, 4);
        return sizeof(*sin);
    }
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)out;
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(port);
    memcpy(&sin6->sin6_addr, addr, 16);
    return sizeof(*sin6);
}

bool
sl_ip_is_loopback(const char *s)
{
    int family;
    uint8_t addr[16];
    if (!sl_ip_parse(s, &family, addr))
        return false;
    if (family == AF_INET)
        return addr[0] == 127;
    static const uint8_t v6_loopback[16] = {[15] = 1};
    return memcmp(addr, v6_loopback, 16) == 0;
}

bool
sl_cidr_parse(const char *s, sl_cidr_t *out)
{
    char host[64];
    const char *slash = strchr(s, '/');
    size_t host_len = slash ? (size_t)(slash - s) : strlen(s);
    if (host_len == 0 || host_len >= sizeof(host))
        return false;
    memcpy(host, s, host_len);
    host[host_len] = '\0';
    memset(out, 0, sizeof(*out));
    if (!sl_ip_parse(host, &out->family, out->addr))
        return false;
    unsigned max_bits = out->family == AF_INET ? 32 : 128;
    unsigned bits = max_bits;
    if (slash != NULL) {
        const char *p = slash + 1;
        if (*p == '\0' || strlen(p) > 3)
            return false;
        bits = 0;
        for (; *p; p++) {
            if (*p < '0' || *p > '9')
                return false;
            bits = bits * 10 + (unsigned)(*p - '0');
        }
        if (bits > max_bits)
            return false;
    }
    out->prefix_bits = (uint8_t)bits;
    return true;
}

static bool
prefix_equal(const uint8_t *a, const uint8_t *b, unsigned bits)
{
    unsigned whole = bits / 8, rest = bits % 8;
    if (memcmp(a, b, whole) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[whole] & mask) == (b[whole] & mask);
}

/*
 * A peer's address bytes: v6 for an IPv6 peer, v4 for an IPv4 one and for an
 * IPv4-mapped IPv6 one (::ffff:a.b.c.d), which is an IPv4 client on a dual-stack listener.
 */
static void
peer_address(const struct sockaddr *peer, uint8_t v4[4], bool *has_v4, uint8_t v6[16], bool *has_v6)
{
    *has_v4 = *has_v6 = false;
    if (peer->sa_family == AF_INET) {
        memcpy(v4, &((const struct sockaddr_in *)peer)->sin_addr, 4);
        *has_v4 = true;
    } else if (peer->sa_family == AF_INET6) {
        memcpy(v6, &((const struct sockaddr_in6 *)peer)->sin6_addr, 16);
        *has_v6 = true;
        static const uint8_t mapped_prefix[12] = {[10] = 0xff, [11] = 0xff};
        if (memcmp(v6, mapped_prefix, 12) == 0) {
            memcpy(v4, v6 + 12, 4);
            *has_v4 = true;
        }
    }
}

bool
sl_cidr_allows(const sl_cidr_t *ranges, size_t n, const struct sockaddr *peer)
{
    if (n == 0)
        return true;
    uint8_t v4[4], v6[16];
    bool has_v4, has_v6;
    peer_address(peer, v4, &has_v4, v6, &has_v6);
    for (size_t i = 0; i < n; i++) {
        if (ranges[i].family == AF_INET && has_v4 && prefix_equal(ranges[i].addr, v4, ranges[i].prefix_bits))
            return true;
        if (ranges[i].family == AF_INET6 && has_v6 && prefix_equal(ranges[i].addr, v6, ranges[i].prefix_bits))
            return true;
    }
    return false;
}

bool
sl_sockaddr_is_loopback(const struct sockaddr *peer)
{
    uint8_t v4[4], v6[16];
    bool has_v4, has_v6;
    peer_address(peer, v4, &has_v4, v6, &has_v6);
    static const uint8_t v6_loopback[16] = {[15] = 1};
    return has_v4 ? v4[0] == 127 : has_v6 && memcmp(v6, v6_loopback, 16) == 0;
}
