import Foundation
import Testing

/// `doctor` says what a person needs to know, each claim found by trying:
/// the private view as root, as an unprivileged user, and where user
/// namespaces are refused (and `run` agrees with it there).
@Suite struct DoctorCLITests {
    static let canBecomeNobody = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")
        && FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare")
    let home = CLI.Home()

    /// Runs `arguments` as uid 65534, or (with `userNamespaces: false`) as
    /// uid 65534 in a user namespace whose user.max_user_namespaces is 0, so
    /// that no user namespace can be made under it (a throwaway namespace's
    /// own setting: the host's is untouched).
    func asNobody(_ arguments: [String], userNamespaces: Bool = true) throws -> CLI.Result {
        #expect(try CLI.program("/bin/chown", ["-R", "65534:65534", home.path]).status == 0)
        let become = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", CLI.binary] + arguments
        guard !userNamespaces else { return try CLI.program(become[0], Array(become.dropFirst()), environment: home.environment) }
        let script = #"""
            set -eu
            work=$(mktemp -d)
            trap 'rm -rf "$work"' EXIT
            mkfifo "$work/go"
            # The shell execs itself once the ids are mapped: an exec before, as the overflow uid, dropped every capability.
            unshare --user /bin/sh -c 'read _ < "$0" && exec /bin/sh -c "echo 0 > /proc/sys/user/max_user_namespaces && exec \"\$@\"" _ "$@"' "$work/go" "$@" &
            child=$!
            mine=$(readlink /proc/self/ns/user)
            for _ in $(seq 500); do [ "$(readlink /proc/$child/ns/user)" != "$mine" ] && break; sleep 0.01; done
            echo '0 0 65536' > /proc/$child/uid_map
            echo '0 0 65536' > /proc/$child/gid_map
            echo go > "$work/go"
            wait $child
            """#
        return try CLI.program("/bin/bash", ["-c", script, "nouserns"] + become, environment: home.environment)
    }

    func json(_ result: CLI.Result) throws -> [String: Any] {
        let object = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        return try #require(object, "\(result)")
    }

    func feature(_ report: [String: Any], _ name: String) -> (available: Bool?, how: String?, problem: String?) {
        let entry = report[name] as? [String: Any]
        return (entry?["available"] as? Bool, entry?["how"] as? String, entry?["problem"] as? String)
    }

    @Test(.enabled(if: getuid() == 0, "needs root"))
    func asRootThePrivateViewNeedsNoUserNamespace() throws {
        let result = try CLI.run(["doctor", "--policy", "writer"], home: home)
        #expect(result.stdout.contains("\nprivate view: yes, as root"), "\(result)")
        #expect(result.stdout.contains("\nlive grants: yes"), "\(result)")
        #expect(result.stdout.contains("\nstaged grants: not available in this version"), "\(result)")
        // Capabilities in words, not libcap's `=ep cap_x-ep`.
        let capabilities = result.stdout.split(separator: "\n").first { $0.hasPrefix("launcher capabilities: ") } ?? ""
        #expect(capabilities.hasPrefix("launcher capabilities: all") && !capabilities.contains("="), "\(capabilities)")
        #expect(capabilities.hasSuffix("; the command gets none"), "\(capabilities)")
        let report = try json(try CLI.run(["doctor", "--policy", "writer", "--json"], home: home))
        #expect(feature(report, "privateView") == (true, "root", ""))
        #expect(((report["capabilities"] as? [String: Any])?["effective"] as? [String])?.contains("cap_sys_admin") == true)
    }

    @Test(.enabled(if: canBecomeNobody, "needs root (to become uid 65534), setpriv and unshare"))
    func unprivilegedThePrivateViewComesFromAUserNamespace() throws {
        let result = try asNobody(["doctor", "--policy", "writer"])
        #expect(result.stdout.contains("\nprivate view: yes, in an unprivileged user namespace"), "\(result)")
        #expect(result.stdout.contains("\nlive grants: yes"), "\(result)")
        #expect(result.stdout.contains("\nlauncher capabilities: none"), "\(result)")
        let report = try json(try asNobody(["doctor", "--policy", "writer", "--json"]))
        #expect(feature(report, "privateView") == (true, "user-namespace", ""))
        #expect((report["capabilities"] as? [String: Any])?["effective"] as? [String] == [])
    }

    /// Where no user namespace can be made, doctor says the view cannot be
    /// had, and `run` indeed stops there; --view host still runs.
    @Test(.enabled(if: canBecomeNobody, "needs root (to become uid 65534), setpriv and unshare"))
    func withoutUserNamespacesNeitherDoctorNorRunClaimsTheView() throws {
        let result = try asNobody(["doctor", "--policy", "writer"], userNamespaces: false)
        #expect(result.stdout.contains("\nprivate view: NO: an unprivileged user namespace is refused"), "\(result)")
        #expect(result.stdout.contains("--view host"), "\(result)")
        #expect(result.stdout.contains("\nlive grants: NO: they are attached in the private view"), "\(result)")
        let report = try json(try asNobody(["doctor", "--policy", "writer", "--json"], userNamespaces: false))
        let view = feature(report, "privateView")
        #expect(view.available == false && view.how == "none" && view.problem?.contains("ENOSPC") == true, "\(view)")
        #expect(feature(report, "liveGrants").available == false)
        let run = try asNobody(["run", "--app", "com.example.doctor", "--", "/bin/true"], userNamespaces: false)
        #expect(run.status == 125 && run.stderr.contains("private view"), "\(run)")
        let host = try asNobody(["run", "--app", "com.example.doctor", "--view", "host", "--", "/bin/true"], userNamespaces: false)
        #expect(host.status == 0, "\(host)")
    }

    /// The documented shape (docs/confinement.md): these keys, these types.
    @Test func theJSONShapeIsTheDocumentedOne() throws {
        let result = try CLI.run(["doctor", "--json"], home: home)
        let report = try json(result)
        #expect(Set(report.keys) == ["version", "landlock", "seccomp", "privateView", "liveGrants", "stagedGrants", "capabilities", "policies"])
        #expect(report["version"] as? Int == 1)
        #expect(Set((report["landlock"] as? [String: Any])?.keys ?? [:].keys) == ["abi", "knownABI"])
        #expect(Set((report["seccomp"] as? [String: Any])?.keys ?? [:].keys) == ["filter", "userNotification"])
        for name in ["privateView", "liveGrants", "stagedGrants"] {
            #expect(Set((report[name] as? [String: Any])?.keys ?? [:].keys) == ["available", "how", "problem"], "\(name)")
        }
        #expect(feature(report, "stagedGrants") == (false, "none", "not in this version (issue #32)"))
        #expect(Set((report["capabilities"] as? [String: Any])?.keys ?? [:].keys) == ["effective", "missing"])
        let policies = try #require(report["policies"] as? [[String: Any]])
        #expect(policies.compactMap { $0["source"] as? String } == ["builtin:writer", "builtin:read-only", "builtin:networked", "builtin:developer"])
        for policy in policies {
            #expect(Set(policy.keys) == ["source", "enforced", "protections"])
            let protections = try #require(policy["protections"] as? [[String: Any]])
            #expect(!protections.isEmpty && protections.allSatisfy { Set($0.keys) == ["name", "enforced", "reportOnly", "detail"] })
        }
        #expect(result.status == (policies.allSatisfy { $0["enforced"] as? Bool == true } ? 0 : 1))
    }
}
