import ArgumentParser
import AppSandbox

struct Doctor: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Report what this kernel can enforce, and what each policy would get."
    )

    @Option(help: "Report only this policy (a built-in name or a file).")
    var policy: String?

    func run() throws {
        let features = KernelFeatures.probe()
        print("Landlock ABI: \(features.landlockABI) (this build knows up to \(Landlock.newestKnownABI))")
        print("seccomp filter: \(features.seccompFilter ? "yes" : "no")")
        print("seccomp user notification: \(features.seccompUserNotification ? "yes" : "no")")
        print("launcher capabilities: \(Doctor.capabilities)")
        let names = policy.map { [$0] } ?? Policy.builtinNames
        var allEnforced = true
        for name in names {
            let loaded = try PolicyChoice.load(name, session: try SandboxSession.cli())
            let report = EnforcementReport(features: features, policy: loaded)
            allEnforced = allEnforced && report.missing.isEmpty
            print("\npolicy \(Printable.path(loaded.source)):")
            print(report.text)
        }
        if !allEnforced { throw ExitCode(1) }
    }

    static var capabilities: String { KernelFeatures.launcherCapabilities }
}
