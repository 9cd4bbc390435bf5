import CCap

/// The launcher's own capabilities, read with libcap in the parent; the
/// child drops them with raw syscalls (libcap allocates).
enum Capabilities {
    /// The highest capability number the running kernel knows.
    static var lastCapability: Int32 {
        Int32(cap_max_bits()) - 1
    }

    /// Whether this process may change the bounding set and securebits.
    static var canDropBoundingSet: Bool {
        has(CAP_SETPCAP)
    }

    static func has(_ capability: cap_value_t) -> Bool {
        guard let caps = cap_get_proc() else { return false }
        defer { cap_free(UnsafeMutableRawPointer(caps)) }
        var value = CAP_CLEAR
        guard cap_get_flag(caps, capability, CAP_EFFECTIVE, &value) == 0 else { return false }
        return value == CAP_SET
    }

    /// `cap_to_text` of the current process, for `doctor`.
    static var currentText: String {
        guard let caps = cap_get_proc() else { return "unknown" }
        defer { cap_free(UnsafeMutableRawPointer(caps)) }
        guard let text = cap_to_text(caps, nil) else { return "unknown" }
        defer { cap_free(text) }
        let result = String(cString: text)
        return result.isEmpty ? "none" : result
    }
}
