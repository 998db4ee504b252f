// Package atrest is test support for what ringmaster leaves at rest: the
// byte strings by which a key is found in a Secret or in etcd's files, and
// the EncryptionConfiguration the project's control planes run with
// (Secrets encrypted at rest). It imports only the standard library and
// internal/keyring.
package atrest
