//! The operations of the fakes, by which faults are injected and calls recorded.

/// The operations a fault can be injected into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[allow(missing_docs)] // each is the port method of the same name
pub enum FakeOp {
    Resolve,
    Fetch,
    Compare,
    Inputs,
    Start,
    Setup,
    Init,
    Workspace,
    Plan,
    RefreshPlan,
    Show,
    Apply,
    Attach,
    Release,
    Output,
    Inventory,
    Unlock,
    Cleanup,
    SavePlan,
    DeletePlan,
    WriteOutputs,
    DeleteOutputs,
    WriteConfigMap,
    DeleteConfigMap,
    DeleteState,
    Health,
    WriteStatus,
    AddFinalizer,
    RemoveFinalizer,
}
