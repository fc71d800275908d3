/* What the control plane shows of the cluster: heartbeats' counts, the others' totals, the instance list. */
#include <criterion/criterion.h>
#include <string.h>

#include "cluster_view.h"

Test(cluster_view, a_heartbeat_holds_each_upstreams_in_flight_and_queued_counts)
{
    sl_cluster_count_t counts[] = {{"anthropic", 3, 1}, {"open \"ai\"", 0, 2}};
    char out[512];
    sl_cluster_describe(counts, 2, 1700000000123, out, sizeof(out));
    cr_assert(strstr(out, "\"at_ms\":1700000000123") != NULL, "%s", out);
    cr_assert(strstr(out, "\"anthropic\":[3,1]") != NULL, "%s", out);
    cr_assert(strstr(out, "\"open \\\"ai\\\"\":[0,2]") != NULL, "a name is escaped: %s", out);
}

Test(cluster_view, a_heartbeat_too_small_for_its_counts_still_names_its_time)
{
    sl_cluster_count_t counts[] = {{"a-rather-long-upstream-name", 3, 1}};
    char out[40];
    sl_cluster_describe(counts, 1, 5, out, sizeof(out));
    cr_assert(strstr(out, "\"at_ms\":5") != NULL, "%s", out);
    cr_assert_null(strstr(out, "a-rather-long"), "%s", out);
}

static sl_cluster_member_t roster[] = {
    {"a", "{\"pid\":1,\"at_ms\":1000,\"up\":{\"one\":[4,0],\"two\":[1,1]}}"},
    {"b", "{\"pid\":2,\"at_ms\":1500,\"up\":{\"one\":[2,3]}}"},
    {"c", "not json"},
    {"d", "{\"pid\":4,\"at_ms\":900}"},
};

Test(cluster_view, the_others_counts_leave_this_instances_heartbeat_out)
{
    sl_cluster_count_t counts[] = {{"one", 9, 9}, {"two", 9, 9}, {"three", 9, 9}};
    sl_cluster_others_counts(roster, 4, "a", counts, 3);
    cr_assert_eq(counts[0].in_flight, 2);
    cr_assert_eq(counts[0].queued, 3);
    cr_assert_eq(counts[1].in_flight + counts[1].queued, 0, "only a's heartbeat counts two");
    sl_cluster_others_counts(roster, 4, "b", counts, 3);
    cr_assert_eq(counts[0].in_flight, 4, "a's heartbeat counts, an unreadable one counts nothing");
    cr_assert_eq(counts[0].queued, 0);
    cr_assert_eq(counts[1].in_flight, 1);
    cr_assert_eq(counts[1].queued, 1);
    cr_assert_eq(counts[2].in_flight + counts[2].queued, 0, "an upstream no heartbeat names");
}

Test(cluster_view, the_instance_list_shows_this_instance_with_its_counts_of_now)
{
    sl_proto_instance_view_t *v;
    size_t n = sl_cluster_instance_views(roster, 4, "b", 7, 8, 2000, &v);
    cr_assert_eq(n, 4);
    cr_assert_str_eq(v[0].name, "a");
    cr_assert_not(v[0].self);
    cr_assert_eq(v[0].in_flight, 5, "every upstream together");
    cr_assert_eq(v[0].queued, 1);
    cr_assert_eq(v[0].seen_ms, 1000);
    cr_assert(v[1].self);
    cr_assert_eq(v[1].in_flight, 7);
    cr_assert_eq(v[1].queued, 8);
    cr_assert_eq(v[1].seen_ms, 2000);
    cr_assert_eq(v[2].in_flight + v[2].queued + v[2].seen_ms, 0, "an unreadable heartbeat shows no counts");
    cr_assert_eq(v[3].seen_ms, 900);
    for (size_t i = 0; i < n; i++)
        sl_proto_instance_view_free(&v[i]);
    free(v);
}
