/// The policy files shipped in `Policies/`, embedded in the binary so the
/// launcher needs no file at run time and the files stay the one source.
public enum BuiltinPolicies {
    /// Names as given to `--policy`, with their plist bytes.
    public static let all: [(name: String, plist: [UInt8])] = [
        ("writer", PackageResources.writer_plist),
        ("read-only", PackageResources.read_only_plist),
        ("networked", PackageResources.networked_plist),
        ("developer", PackageResources.developer_plist),
    ]

    /// The policy `run` uses when `--policy` is absent.
    public static let defaultName = "writer"
}
