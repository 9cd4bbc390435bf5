import ArgumentParser
import AppSandbox

struct Doctor: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Report what this kernel and this user can enforce, and what each policy would get.",
        discussion: """
            The private view is tried, not guessed: a child takes the namespaces the launcher's keeper takes and mounts \
            a tmpfs there. --json prints one object (docs/confinement.md, "doctor --json"). Exit codes: 0 every \
            protection of the policies reported is enforced, 1 some is not, 125 usage.
            """
    )

    @Option(help: "Report only this policy (a built-in name or a file).")
    var policy: String?

    @Flag(help: "Print one JSON object, for scripts.")
    var json = false

    func run() throws {
        let features = KernelFeatures.probe()
        let view = PrivateViewAvailability.probe()
        let names = policy.map { [$0] } ?? Policy.builtinNames
        var policies: [DoctorReport.PolicyReport] = []
        for name in names {
            let loaded = try PolicyChoice.load(name, session: try SandboxSession.cli())
            let report = EnforcementReport(features: features, policy: loaded)
            policies.append(.init(
                source: Printable.path(loaded.source), enforced: report.missing.isEmpty, text: report.text,
                protections: report.protections.map { .init(name: $0.name, enforced: $0.enforced, reportOnly: $0.reportOnly, detail: $0.detail) }))
        }
        let report = DoctorReport(features: features, view: view, policies: policies)
        if json { print(JSON.encode(report)) } else { print(report.text) }
        if policies.contains(where: { !$0.enforced }) { throw ExitCode(1) }
    }
}

/// What `doctor` found; its JSON is the documented shape (docs/confinement.md).
struct DoctorReport: Encodable {
    struct Landlock: Encodable { let abi: Int, knownABI: Int }
    struct Seccomp: Encodable { let filter: Bool, userNotification: Bool }
    /// `how`: "root", "user-namespace" or "none"; `problem`: "" when available.
    struct Feature: Encodable { let available: Bool, how: String, problem: String }
    struct Capabilities: Encodable { let effective: [String], missing: [String] }
    struct Protection: Encodable { let name: String, enforced: Bool, reportOnly: Bool, detail: String }
    struct PolicyReport: Encodable {
        let source: String, enforced: Bool
        let text: String
        let protections: [Protection]
        enum CodingKeys: String, CodingKey { case source, enforced, protections }
    }

    let version = 1
    let landlock: Landlock
    let seccomp: Seccomp
    let privateView: Feature
    let liveGrants: Feature
    let stagedGrants: Feature
    let capabilities: Capabilities
    let policies: [PolicyReport]

    init(features: KernelFeatures, view: PrivateViewAvailability, policies: [PolicyReport]) {
        landlock = Landlock(abi: features.landlockABI, knownABI: AppSandbox.Landlock.newestKnownABI)
        seccomp = Seccomp(filter: features.seccompFilter, userNotification: features.seccompUserNotification)
        switch view {
        case .root:
            privateView = Feature(available: true, how: "root", problem: "")
        case .userNamespace:
            privateView = Feature(available: true, how: "user-namespace", problem: "")
        case .unavailable(let problem):
            privateView = Feature(available: false, how: "none", problem: problem)
        }
        // Live grants are attached in the private view's grant area, built with the same namespaces.
        liveGrants = privateView.available
            ? Feature(available: true, how: privateView.how, problem: "")
            : Feature(available: false, how: "none", problem: "they are attached in the private view, which cannot be built here")
        stagedGrants = Feature(available: false, how: "none", problem: "not in this version (issue #32)")
        capabilities = Capabilities(effective: KernelFeatures.launcherCapabilityNames, missing: KernelFeatures.launcherMissingCapabilities)
        self.policies = policies
    }

    var text: String {
        var lines = [
            "Landlock ABI: \(landlock.abi) (this build knows up to \(landlock.knownABI))",
            "seccomp filter: \(seccomp.filter ? "yes" : "no")",
            "seccomp user notification: \(seccomp.userNotification ? "yes" : "no")",
        ]
        switch privateView.how {
        case "root": lines.append("private view: yes, as root (mount and pid namespaces of the sandbox's own)")
        case "user-namespace": lines.append("private view: yes, in an unprivileged user namespace")
        default:
            lines.append("private view: NO: \(privateView.problem).")
            lines.append("  `run` stops (125) unless given --view host (every host path visible to stat, Landlock still refusing "
                + "what the policy does not allow) or --best-effort (falls back to the host view and says so)")
        }
        lines.append(liveGrants.available
            ? "live grants: yes (open-panel and start-accessing attach folders while the command runs, in the private view)"
            : "live grants: NO: \(liveGrants.problem); launch-time grants (--grant) still work")
        lines.append("staged grants: not available in this version (issue #32)")
        lines.append("launcher capabilities: " + capabilityText)
        for policy in policies {
            lines.append("\npolicy \(policy.source):")
            lines.append(policy.text)
        }
        return lines.joined(separator: "\n")
    }

    var capabilityText: String {
        func named(_ names: [String]) -> String {
            names.map { name in
                let words = KernelFeatures.capabilityWords(name)
                return words.isEmpty ? name : "\(name) (\(words))"
            }.joined(separator: ", ")
        }
        let held = capabilities.effective, missing = capabilities.missing
        if held.isEmpty { return "none (an ordinary user: the sandbox's namespaces then come from a user namespace)" }
        if missing.isEmpty { return "all (root); the command gets none" }
        if held.count >= missing.count { return "all but " + named(missing) + "; the command gets none" }
        return named(held) + "; the command gets none"
    }
}
