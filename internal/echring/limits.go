package echring

// The bounds of an ECH ring. The operator keeps every ring within them and
// the agent refuses a ring beyond them, so that a forged or corrupt file
// cannot make every handshake expensive: crypto/tls tries each key's HPKE
// decryption of a client's hello in turn, and sends every retry config in
// each rejection.
const (
	// MaxConfigs is the most configs a ring holds: the staged config, the
	// published one and the retired ones still decrypting.
	MaxConfigs = 4

	// SeedSize is the size of the random seed a config's private key is
	// derived from.
	SeedSize = 32

	// MaxSuites is the most cipher suites a config offers: every pair of
	// the KDFs and AEADs Go accepts.
	MaxSuites = 9

	// MaxPublicNameLength is the longest public_name: a DNS name of at most
	// 253 characters, as crypto/tls checks it.
	MaxPublicNameLength = 253

	// MaxConfigSize bounds one encoded ECHConfig: the largest public key Go
	// accepts (P-521's 133 bytes), MaxSuites suites and the longest public
	// name, with their headers, fit well within it.
	MaxConfigSize = 512

	// MaxPrivateKeySize bounds a private key: P-521's 66 bytes.
	MaxPrivateKeySize = 66
)
