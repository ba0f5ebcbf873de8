/* Compiled INSTEAD of src/zookeeper.c when feature `tls` or `sasl` is on (see
 * build/vendored.rs): it includes that file whole, so the library is upstream's code plus
 * one function.
 *
 * Why: upstream's public entry points each leave something out. `zookeeper_init_ssl` takes
 * no log callback (the handle's init and IO-thread logs would go to stderr, and setting
 * the callback afterwards races the IO thread), and neither it nor `zookeeper_init_sasl`
 * can combine TLS with SASL. Both call the file-static `zookeeper_init_internal`, which
 * takes everything; `zookeeper_mt_sys_init_secure` exposes it.
 *
 * `cert` is upstream's "ca,cert,key[,passwd]" string (the format of zookeeper_init_ssl),
 * or NULL for a plaintext connection; `sasl_params` is a `zoo_sasl_params_t *` or NULL.
 * Unlike zookeeper_init_ssl, the string is parsed in the one copy the handle frees (no
 * leak) and fewer than three fields fail with EINVAL instead of handing NULL paths to
 * OpenSSL. Asking for TLS or SASL in a build without it fails with ENOTSUP. */
#include "zookeeper.c"

zhandle_t *zookeeper_mt_sys_init_secure(const char *host, const char *cert,
        watcher_fn watcher, int recv_timeout, const clientid_t *clientid,
        void *context, int flags, log_callback_fn log_callback, void *sasl_params)
{
    zcert_t zcert;
    zcert_t *zcert_ptr = NULL;

#ifndef HAVE_CYRUS_SASL_H
    if (sasl_params) {
        errno = ENOTSUP;
        return NULL;
    }
#endif
    if (cert) {
#ifdef HAVE_OPENSSL_H
        char *saveptr = NULL;
        memset(&zcert, 0, sizeof(zcert));
        zcert.certstr = strdup(cert);
        if (!zcert.certstr) {
            errno = ENOMEM;
            return NULL;
        }
        zcert.ca = strtok_r(zcert.certstr, ",", &saveptr);
        zcert.cert = strtok_r(NULL, ",", &saveptr);
        zcert.key = strtok_r(NULL, ",", &saveptr);
        zcert.passwd = strtok_r(NULL, ",", &saveptr);
        if (!zcert.ca || !zcert.cert || !zcert.key) {
            free(zcert.certstr);
            errno = EINVAL;
            return NULL;
        }
        zcert_ptr = &zcert;
#else
        errno = ENOTSUP;
        return NULL;
#endif
    }
    /* The handle copies `zcert` (pointers included) and frees certstr in destroy(), also
     * when init fails after the copy. Only if allocating the handle itself fails is the
     * string left behind: a leak of one short string on out-of-memory, never a double
     * free. */
    return zookeeper_init_internal(host, watcher, recv_timeout, clientid, context, flags,
                                   log_callback, zcert_ptr, sasl_params);
}

#ifdef HAVE_OPENSSL_H
/* Password callback for the check below: the given password, never a terminal prompt. */
static int zookeeper_mt_sys_password_cb(char *buf, int size, int rwflag, void *userdata)
{
    const char *password = (const char *)userdata;
    int len;
    (void)rwflag;
    if (!password || size <= 0)
        return -1;
    len = (int)strlen(password);
    if (len > size)
        len = size;
    memcpy(buf, password, (size_t)len);
    return len;
}

/* Loads what `cert` ("ca,cert,key[,passwd]") names the way init_ssl_for_socket does, once,
 * without connecting. The C client treats a failure there as a connection error and
 * retries it from its IO thread without pause (a busy loop until the handle is closed);
 * checking first turns it into an immediate error.
 *
 * Returns 0 if everything loads; else the step that failed, 1 CA file, 2 certificate
 * chain, 3 private key (or its password), 4 key does not match the certificate,
 * 5 malformed string, 6 out of memory; with OpenSSL's reason in `error` (NUL-terminated,
 * truncated to `error_len`). */
int zookeeper_mt_sys_check_tls(const char *cert, char *error, size_t error_len)
{
    char *copy, *saveptr = NULL;
    const char *ca, *chain, *key, *passwd;
    SSL_CTX *ctx;
    int step = 0;

    if (error && error_len)
        error[0] = '\0';
    if (!cert)
        return 5;
    copy = strdup(cert);
    if (!copy)
        return 6;
    ca = strtok_r(copy, ",", &saveptr);
    chain = strtok_r(NULL, ",", &saveptr);
    key = strtok_r(NULL, ",", &saveptr);
    passwd = strtok_r(NULL, ",", &saveptr);
    if (!ca || !chain || !key) {
        free(copy);
        return 5;
    }
    OPENSSL_init_ssl(OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS, NULL);
    ERR_clear_error();
    ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) {
        free(copy);
        return 6;
    }
    SSL_CTX_set_default_passwd_cb(ctx, zookeeper_mt_sys_password_cb);
    SSL_CTX_set_default_passwd_cb_userdata(ctx, (void *)passwd);
    if (SSL_CTX_load_verify_locations(ctx, ca, 0) != 1)
        step = 1;
    else if (SSL_CTX_use_certificate_chain_file(ctx, chain) != 1)
        step = 2;
    else if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
        step = 3;
    else if (SSL_CTX_check_private_key(ctx) != 1)
        step = 4;
    if (step && error && error_len) {
        unsigned long code = ERR_peek_last_error();
        if (code)
            ERR_error_string_n(code, error, error_len);
    }
    ERR_clear_error();
    SSL_CTX_free(ctx);
    free(copy);
    return step;
}
#endif
