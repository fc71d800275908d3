/* Address parsing and allow_from matching. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <string.h>

#include "core/cidr.h"

static struct sockaddr_storage
peer(const char *ip)
{
    struct sockaddr_storage ss = {0};
    if (strchr(ip, ':') != NULL) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        inet_pton(AF_INET6, ip, &s6->sin6_addr);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        inet_pton(AF_INET, ip, &s4->sin_addr);
    }
    return ss;
}

static bool
allows(const char *range, const char *ip)
{
    sl_cidr_t c;
    cr_assert(sl_cidr_parse(range, &c), "cannot parse %s", range);
    struct sockaddr_storage ss = peer(ip);
    return sl_cidr_allows(&c, 1, (struct sockaddr *)&ss);
}

Test(cidr, parses_good_ranges_and_rejects_bad_ones)
{
    sl_cidr_t c;
    const char *good[] = {"10.0.0.0/8", "127.0.0.1", "::1", "fe80::/10", "0.0.0.0/0", "192.168.1.0/24"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        cr_assert(sl_cidr_parse(good[i], &c), "%s", good[i]);
    const char *bad[] = {"",          "/8",         "10.0.0.0/33", "::/129",
                         "10.0.0.0/", "10.0.0.0/x", "host/8",      "1.2.3.4/0008"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_not(sl_cidr_parse(bad[i], &c), "%s", bad[i]);
}

Test(cidr, matches_by_prefix)
{
    cr_assert(allows("10.0.0.0/8", "10.200.3.4"));
    cr_assert_not(allows("10.0.0.0/8", "11.0.0.1"));
    cr_assert(allows("192.168.1.128/25", "192.168.1.200"));
    cr_assert_not(allows("192.168.1.128/25", "192.168.1.127"));
    cr_assert(allows("0.0.0.0/0", "8.8.8.8"));
    cr_assert(allows("::1", "::1"));
    cr_assert_not(allows("::1", "::2"));
    cr_assert(allows("fe80::/10", "fe80::1234"));
}

Test(cidr, ipv4_mapped_peers_match_ipv4_ranges)
{
    cr_assert(allows("127.0.0.0/8", "::ffff:127.0.0.1"));
    cr_assert_not(allows("10.0.0.0/8", "::ffff:127.0.0.1"));
}

Test(cidr, empty_list_allows_everyone)
{
    struct sockaddr_storage ss = peer("203.0.113.9");
    cr_assert(sl_cidr_allows(NULL, 0, (struct sockaddr *)&ss));
}

Test(cidr, loopback_detection)
{
    cr_assert(sl_ip_is_loopback("127.0.0.1"));
    cr_assert(sl_ip_is_loopback("127.9.9.9"));
    cr_assert(sl_ip_is_loopback("::1"));
    cr_assert_not(sl_ip_is_loopback("0.0.0.0"));
    cr_assert_not(sl_ip_is_loopback("::"));
    cr_assert_not(sl_ip_is_loopback("localhost"));
}

static bool
peer_is_loopback(const char *ip)
{
    struct sockaddr_storage ss = peer(ip);
    return sl_sockaddr_is_loopback((struct sockaddr *)&ss);
}

Test(cidr, a_loopback_peer_is_127_8_or_1_or_mapped_127_and_nothing_else)
{
    cr_assert(peer_is_loopback("127.0.0.1"));
    cr_assert(peer_is_loopback("127.200.0.3"));
    cr_assert(peer_is_loopback("::1"));
    cr_assert(peer_is_loopback("::ffff:127.0.0.1"));
    cr_assert_not(peer_is_loopback("128.0.0.1"));
    cr_assert_not(peer_is_loopback("10.0.0.1"));
    cr_assert_not(peer_is_loopback("::"));
    cr_assert_not(peer_is_loopback("::2"));
    cr_assert_not(peer_is_loopback("::ffff:10.0.0.1"));
    struct sockaddr_storage unix_peer = {.ss_family = AF_UNIX};
    cr_assert_not(sl_sockaddr_is_loopback((struct sockaddr *)&unix_peer));
}

Test(cidr, an_ip_literal_and_a_port_make_a_socket_address_and_a_name_makes_none)
{
    struct sockaddr_storage ss;
    cr_assert_eq(sl_ip_sockaddr("127.0.0.1", 8080, &ss), sizeof(struct sockaddr_in));
    const struct sockaddr_in *sin = (const struct sockaddr_in *)&ss;
    cr_assert_eq(sin->sin_family, AF_INET);
    cr_assert_eq(ntohs(sin->sin_port), 8080);
    cr_assert_eq(ntohl(sin->sin_addr.s_addr), 0x7f000001);

    cr_assert_eq(sl_ip_sockaddr("::1", 443, &ss), sizeof(struct sockaddr_in6));
    const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&ss;
    cr_assert_eq(sin6->sin6_family, AF_INET6);
    cr_assert_eq(ntohs(sin6->sin6_port), 443);
    cr_assert(IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr));

    cr_assert_eq(sl_ip_sockaddr("localhost", 80, &ss), 0, "a name is not an address");
    cr_assert_eq(sl_ip_sockaddr("[::1]", 80, &ss), 0, "brackets belong to URLs, not to addresses");
}
