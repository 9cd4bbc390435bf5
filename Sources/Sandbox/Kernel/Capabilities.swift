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

extension Capabilities {
    /// The effective capabilities of this process, by libcap's names.
    static var effective: [String] {
        guard let caps = cap_get_proc() else { return [] }
        defer { cap_free(UnsafeMutableRawPointer(caps)) }
        var names: [String] = []
        for value in 0...lastCapability {
            var flag = CAP_CLEAR
            guard cap_get_flag(caps, cap_value_t(value), CAP_EFFECTIVE, &flag) == 0, flag == CAP_SET else { continue }
            guard let name = cap_to_name(cap_value_t(value)) else { continue }
            names.append(String(cString: name))
            cap_free(name)
        }
        return names
    }

    /// Every capability this kernel knows, by libcap's names.
    static var all: [String] {
        (0...lastCapability).compactMap { value in
            guard let name = cap_to_name(cap_value_t(value)) else { return nil }
            defer { cap_free(name) }
            return String(cString: name)
        }
    }

    /// What a capability lets the launcher do, for the ones a person may need to know.
    static func words(_ name: String) -> String {
        switch name {
        case "cap_sys_admin": "mount and make namespaces"
        case "cap_sys_resource": "raise resource limits above their hard limit"
        case "cap_dac_override": "read and write any file"
        case "cap_dac_read_search": "read any file and open files by handle"
        case "cap_setuid", "cap_setgid": "change user or group ids"
        case "cap_setpcap": "drop capabilities from the bounding set"
        case "cap_net_admin": "configure networks"
        case "cap_sys_ptrace": "trace any process"
        case "cap_chown": "change any file's owner"
        case "cap_fowner": "change any file's mode and times"
        case "cap_kill": "signal any process"
        default: ""
        }
    }
}
