/* Reports what the C compiler sees in the header in use, so tests can check the
 * committed Rust bindings against it (see tests/layout.rs). */
#include <stddef.h>
#include <zookeeper.h>
#include <zookeeper_version.h>

const char *zookeeper_mt_sys_probe_version(void) { return ZOO_VERSION; }

size_t zookeeper_mt_sys_probe_size(int which) {
    switch (which) {
    case 0: return sizeof(struct Stat);
    case 1: return sizeof(struct ACL);
    case 2: return sizeof(struct Id);
    case 3: return sizeof(struct String_vector);
    case 4: return sizeof(struct ACL_vector);
    case 5: return sizeof(zoo_op_t);
    case 6: return sizeof(zoo_op_result_t);
    case 7: return sizeof(clientid_t);
    case 8: return offsetof(struct Stat, pzxid);
    case 9: return offsetof(zoo_op_result_t, stat);
    case 10: return offsetof(zoo_op_t, set_op);
    default: return (size_t)-1;
    }
}

int zookeeper_mt_sys_probe_int(int which) {
    switch (which) {
    case 0: return ZOO_PERSISTENT;
    case 1: return ZOO_EPHEMERAL_SEQUENTIAL;
    case 2: return ZOO_PERSISTENT_SEQUENTIAL_WITH_TTL;
    case 3: return ZOO_CONNECTED_STATE;
    case 4: return ZOO_EXPIRED_SESSION_STATE;
    case 5: return ZOO_CHILD_EVENT;
    case 6: return ZOO_NOTWATCHING_EVENT;
    case 7: return ZOO_PERM_ALL;
    case 8: return ZNOWATCHER;
    case 9: return ZNONODE;
    case 10: return ZSESSIONEXPIRED;
    case 11: return ZTHROTTLEDOP;
    case 12: return ZOO_LOG_LEVEL_DEBUG;
    case 13: return ZAPIERROR;
    default: return -1;
    }
}
