@preconcurrency import Glibc
import ArgumentParser
import AppSandbox

extension StaleChoice: ExpressibleByArgument {}
extension MissingChoice: ExpressibleByArgument {}

/// `run --grant`: the library's LaunchGrants with the terminal picker.
enum GrantResolver {
    static var hasTerminal: Bool {
        guard isatty(0) == 1 else { return false }
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC)
        if tty >= 0 { close(tty) }
        return tty >= 0
    }

    static func launchGrants(app: AppID, policy: Policy, onStale: StaleChoice, onMissing: MissingChoice) throws -> LaunchGrants {
        var grants = try SandboxSession.cli().launchGrants(
            app: app, policy: policy, onStale: onStale, onMissing: onMissing, picker: Broker.terminalPicker)
        grants.notice = { Console.lines("sandboxed-run: " + Hints.message(for: $0)) }
        return grants
    }
}
