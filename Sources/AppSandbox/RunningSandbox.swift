@preconcurrency import Glibc
import Grants
import Sandbox
import Staging
import SystemPackage

/// A launch-time grant, resolved: the rule built on the descriptor that
/// resolution verified, the variable that names the folder for the command,
/// and the grant it is given under (what the running-sandbox record names,
/// and what a revocation takes away).
public struct ResolvedGrant: Sendable {
    public let name: String
    public let rule: PathRule
    public let variable: String
    public let grant: GrantID
    /// The bookmark it was resolved from (staging keeps it, to resolve the
    /// grant again before applying anything).
    public internal(set) var bookmark: [UInt8]?
    /// For a staged grant (`LaunchGrants.stage`): its staging area, locked
    /// while this grant and the sandbox launched with it live.
    public internal(set) var staging: StagingArea?

    public init(name: String, rule: PathRule, variable: String, grant: GrantID) {
        self.name = name
        self.rule = rule
        self.variable = variable
        self.grant = grant
    }
}

/// A sandbox while it runs, and its one owner: the command's process, the
/// broker over the state used for this launch, the running-sandbox record
/// (written once before the command starts, so that `grants holders` and
/// `grants revoke --end-holders` see it), and the live-grant service that
/// answers the command's requests and takes revoked folders away. `wait()`
/// serves all of them; when it returns, or when this is dropped unwaited
/// (which ends the command), the record goes. What `sandboxed-run run`
/// launches is one of these, made by `SandboxSession.launch`.
public final class RunningSandbox: @unchecked Sendable {
    /// What was planned: rules, filters, the report.
    public let plan: ConfinementPlan
    /// The command's process.
    public let process: ConfinedProcess
    private let registration: SandboxRegistration
    private let service: LiveGrantService?
    /// The staged grants (`LaunchGrants.stage`): their areas stay locked
    /// while this lives, and are flushed when the command ends.
    public let stagedGrants: [ResolvedGrant]

    init(plan: ConfinementPlan, process: ConfinedProcess, registration: SandboxRegistration, service: LiveGrantService?, staged: [ResolvedGrant]) {
        self.plan = plan
        self.process = process
        self.registration = registration
        self.service = service
        stagedGrants = staged
        var now = timespec()
        if !staged.isEmpty { clock_gettime(CLOCK_REALTIME, &now) }  // only a staged launch asks
        started = Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }

    /// When the command was started (ns since the epoch): what a staged grant's clone changed since needs flushing.
    private let started: Int64

    /// The tree the command sees (a best-effort launch may fall back to the host view).
    public var view: FileSystemView { process.view }
    /// What this launch enforces, the view included.
    public var report: EnforcementReport { process.report }
    /// The grants the record names now (empty: nothing is recorded).
    public var recordedGrants: [SandboxRecord.Held] { registration.held }

    /// Forwards the usual termination signals sent to this process to the
    /// sandbox (after `ConfinedProcess.holdTerminationSignals()` before the launch).
    public func forwardSignals() { process.forwardSignals() }

    /// Serves the supervisor, the terminal relay, the broker and revocations
    /// until the command and every process it started have ended; then the
    /// record goes.
    public func wait() throws(SandboxError) -> Termination {
        defer {
            service?.finish()
            registration.end()
        }
        let termination = try process.wait()
        // What the command wrote in a staged grant is on disk before anyone
        // is told it is staged (every process of the sandbox has ended); a
        // clone it left unchanged goes.
        for grant in stagedGrants {
            do { _ = try grant.staging?.settleAfterRun(host: try? grant.rule.descriptor.reopenedFolder(), since: started) } catch {
                throw .setup(step: "flushing the staged changes of grant \(grant.name): \(error)", errno: .ioError)
            }
        }
        return termination
    }
}

extension SandboxSession {
    /// Plans and launches `request` with `grants` (each added to its rules
    /// and environment), as `sandboxed-run run` does: the record is written
    /// before the command starts when it holds grants, live-grant requests
    /// are answered through `picker` (or the relayed terminal) where the
    /// policy allows them, and revoked folders are taken away while it runs.
    /// `planned` sees the plan before anything starts (the CLI prints its
    /// report there). `command`: the command line as given, as bytes, for
    /// the record (default: the request's). `broker`: the one to use for
    /// this launch, when the caller has one open already (`LaunchGrants.broker`).
    /// `reviewing`: the launch stages its read-write grants (true whenever
    /// one of `grants` is staged): a folder attached while it runs (an open
    /// panel, a bookmark the command starts accessing) is then read-only,
    /// since only launch grants are staged and nothing may be written unseen.
    public func launch(
        _ request: LaunchRequest, grants: [ResolvedGrant] = [], picker: AskpassPicker? = nil, broker: GrantBroker? = nil,
        command: [[UInt8]]? = nil, reviewing: Bool = false, planned: (ConfinementPlan) throws -> Void = { _ in }
    ) throws -> RunningSandbox {
        var request = request
        for granted in grants {
            request.folders.append(granted.rule)
            request.pathVariables[granted.variable] = granted.rule.path
        }
        let records = grants.isEmpty ? nil : try broker?.runningSandboxes ?? runningSandboxes()
        let plan = try ConfinementPlan(request)
        try planned(plan)
        LaunchPhases.mark("planned")
        var opened = broker
        let launchBroker = { () throws(GrantError) -> GrantBroker in
            if let opened { return opened }
            let made = try self.broker()
            opened = made
            return made
        }
        // In the private view each launch-time grant that has a bind of its
        // own is taken away on revocation; the record says so from the start.
        let predicted = Set(plan.revocableLaunchGrants)
        let registration = SandboxRegistration(
            records: { () throws(GrantError) -> RunningSandboxes in
                if let records { return records }
                return try self.runningSandboxes()
            },
            app: request.app, view: plan.plannedView, command: command ?? request.command.map { Array($0.utf8) })
        if !grants.isEmpty {
            try registration.begin(
                grants.map {
                    SandboxRecord.Held(grant: $0.grant, path: $0.rule.path, origin: .launch,
                                       revocation: predicted.contains($0.name) ? .takenAway : .keptUntilEnd)
                },
                broker: try launchBroker())
            LaunchPhases.mark("recorded")
        }
        let process = try plan.launch()
        let cut = Set(process.running?.launchGrants ?? [])
        try registration.settle(view: process.view, takenAway: Set(grants.filter { cut.contains($0.name) }.map(\.grant)))
        var service: LiveGrantService?
        if process.liveGrants != nil || !grants.isEmpty {
            var livePolicy = request.policy
            if reviewing || grants.contains(where: { $0.staging != nil }), livePolicy.userSelectedAccess == .readWrite {
                livePolicy.userSelectedAccess = .readOnly
            }
            service = LiveGrantService(
                session: self, app: request.app, policy: livePolicy, picker: picker, registration: registration, broker: opened)
            service?.serve(process, launchGrants: Dictionary(uniqueKeysWithValues: grants.map { ($0.name, $0.grant) }))
        }
        return RunningSandbox(plan: plan, process: process, registration: registration, service: service, staged: grants.filter { $0.staging != nil })
    }
}
