/* Reports what the C compiler sees of the TLS/SASL parts of zookeeper.h when it is
 * compiled with the vendored build's HAVE_OPENSSL_H / HAVE_CYRUS_SASL_H, so
 * tests/tls_sasl_layout.rs can check the hand-written declarations in src/lib.rs.
 * Compiled by build.rs only with feature `tls` or `sasl`. */
#include <stddef.h>
#include <zookeeper.h>

/* What the header was compiled with: bit 0 HAVE_OPENSSL_H, bit 1 HAVE_CYRUS_SASL_H. */
int zookeeper_mt_sys_probe_security_features(void) {
    int features = 0;
#ifdef HAVE_OPENSSL_H
    features |= 1;
#endif
#ifdef HAVE_CYRUS_SASL_H
    features |= 2;
#endif
    return features;
}

/* Sizes and offsets; (size_t)-1 for what this build does not have. */
size_t zookeeper_mt_sys_probe_security_size(int which) {
    switch (which) {
#ifdef HAVE_CYRUS_SASL_H
    case 0: return sizeof(zoo_sasl_params_t);
    case 1: return offsetof(zoo_sasl_params_t, service);
    case 2: return offsetof(zoo_sasl_params_t, host);
    case 3: return offsetof(zoo_sasl_params_t, mechlist);
    case 4: return offsetof(zoo_sasl_params_t, callbacks);
    case 5: return sizeof(sasl_callback_t);
    case 6: return offsetof(sasl_callback_t, id);
    case 7: return offsetof(sasl_callback_t, proc);
    case 8: return offsetof(sasl_callback_t, context);
    case 9: return sizeof(sasl_secret_t);
    case 10: return offsetof(sasl_secret_t, data);
#endif
    default: return (size_t)-1;
    }
}

/* Constants; -12345 for what this build does not have. */
long zookeeper_mt_sys_probe_security_int(int which) {
    switch (which) {
#ifdef HAVE_CYRUS_SASL_H
    case 0: return SASL_OK;
    case 1: return SASL_CONTINUE;
    case 2: return SASL_FAIL;
    case 3: return SASL_NOMEM;
    case 4: return SASL_BADPARAM;
    case 5: return SASL_CB_LIST_END;
    case 6: return SASL_CB_GETREALM;
    case 7: return SASL_CB_USER;
    case 8: return SASL_CB_AUTHNAME;
    case 9: return SASL_CB_PASS;
#endif
    case 10: return ZSSLCONNECTIONERROR;
    default: return -12345;
    }
}

/* Function pointers of the TLS/SASL API, so a test can see the declarations in
 * src/lib.rs and the library agree on the names (and that they link). */
void *zookeeper_mt_sys_probe_security_fn(int which) {
    switch (which) {
#ifdef HAVE_OPENSSL_H
    case 0: return (void *)&zookeeper_init_ssl;
#endif
#ifdef HAVE_CYRUS_SASL_H
    case 1: return (void *)&zookeeper_init_sasl;
    case 2: return (void *)&zoo_sasl_make_basic_callbacks;
    case 3: return (void *)&sasl_client_init;
#endif
    default: return NULL;
    }
}
