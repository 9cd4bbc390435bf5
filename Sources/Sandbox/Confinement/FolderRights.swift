extension Policy {
    /// What the command's Landlock layer allows beneath `rule`: the one
    /// mapping from a rule's access to rights, for the ruleset and for
    /// `--explain`'s predictions. REFER is the caller's (see `ReparentingLayers`).
    func landlockAccess(for rule: PathRule) -> Landlock.FileAccess {
        var rights: Landlock.FileAccess
        switch rule.access {
        case .readExecute: rights = .readExecute
        case .readOnly: rights = .readOnly
        // No links planted where they outlive the grant, unless the policy
        // says so. The sandbox's own mounts (/dev/shm) are the keeper's rules.
        case .readWrite: rights = symbolicLinks || rule.origin == .namespace ? .readWrite : Landlock.FileAccess.readWrite.subtracting(.makeSym)
        }
        // The folders the command was given, never the system paths (the
        // policy lists those it may execute) nor the sandbox's own mounts.
        switch rule.origin {
        case .container, .grant: if executeFiles { rights.insert(.execute) }
        case .system, .launcher, .namespace: break
        }
        return rights
    }
}
