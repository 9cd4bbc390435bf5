import CSyscalls

/// sandboxed-run's version, in semantic versioning. This is the one place it
/// is kept; `scripts/build-release` adds the commit it built from.
public enum SandboxedRunVersion {
    public static let number = "0.1.0"

    /// The git commit of a `scripts/build-release` binary (with `-dirty` for
    /// uncommitted changes), nil for any other build.
    public static var commit: String? {
        let text = String(cString: csb_build_commit())
        return text.isEmpty ? nil : text
    }

    /// What `--version` prints.
    public static var description: String {
        number + " (" + (commit.map { "commit " + $0 } ?? "commit unknown: not built by scripts/build-release from a git checkout") + ")"
    }
}
